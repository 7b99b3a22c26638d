"""agentbench: replay agentic coding workloads against OpenAI-compatible endpoints."""

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "compare", "load", "run_experiment"]


def __getattr__(name: str) -> Any:
    """``agentbench.load`` / ``compare`` / ``run_experiment`` import pandas only when first
    used, so ``import agentbench`` (and the CLI's --help) stays light."""
    if name in ("load", "compare", "Run", "run_experiment"):
        from agentbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'agentbench' has no attribute {name!r}")
