"""agentbench: replay agentic coding workloads against OpenAI-compatible endpoints."""

from typing import Any

__version__ = "0.1.0"

#: what ``agentbench.api`` gives, loaded on first use
_API = ("Comparison", "Run", "compare", "load", "run_experiment")

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    """``agentbench.load`` / ``compare`` / ``run_experiment`` (and the classes they return,
    ``Run`` and ``Comparison``) import pandas only when first used, so ``import
    agentbench`` (and the CLI's --help) stays light."""
    if name in _API:
        from agentbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'agentbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, for tab completion (``dir(agentbench)``)."""
    return sorted({*globals(), *_API})
