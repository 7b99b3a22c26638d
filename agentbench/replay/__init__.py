"""Replay (docs/architecture.md#replay, docs/architecture.md#measurements,
docs/architecture.md#results-on-disk): drive a trace's session trees against
OpenAI-compatible endpoints and write raw records as they complete.

Layering: replay never imports ``agentbench.metrics`` or ``agentbench.report``; every
figure is derived later from the records it writes.
"""

from __future__ import annotations

from typing import Any

from agentbench.replay.clock import run_on
from agentbench.replay.runner import RunResult, run_scenario, stages_of

__all__ = ["RunResult", "run", "run_scenario", "stages_of"]


def run(scenario: Any, **kwargs: Any) -> RunResult:
    """Run ``scenario`` to completion in a fresh event loop (Ctrl-C leaves results written):
    a virtual-clock loop when the scenario runs in virtual time (``clock_mode``)."""
    return run_on(scenario.clock_mode, run_scenario(scenario, **kwargs))
