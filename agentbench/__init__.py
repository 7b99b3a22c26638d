"""agentbench: replay agentic coding workloads against OpenAI-compatible endpoints."""

__version__ = "0.1.0"
