"""The integration stage's share of CI time (docs/engines.md, "Tests").

``.ci/run`` sets ``AGENTBENCH_CI_DEADLINE``, the Unix time by which the integration tests
must have ended. Each costly step (an engine launched and replayed, a simulator fit)
runs only if the time it is expected to take is left, and is skipped otherwise, saying
how long it needs and how long is left. Without the variable (a developer's run) every
step runs.

A step is expected to take the longer of its figure in ``STEPS`` and how long it took
the last time it ended on this host (kept in the engine cache, ``integration-times.json``),
so a slower host raises its own estimates.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DEADLINE_ENV = "AGENTBENCH_CI_DEADLINE"
#: seconds before the deadline at which a running test is ended (conftest.py): kept for
#: the session's own end; a step fits only if it ends before then
MARGIN_S = 60

#: seconds each step takes, rounded up from two measurements of 2026-12-06: the clean-clone
#: CI run of that day (gate 308 s, llama.cpp fit 657 s, vLLM fit about 1,440 s a try) and
#: this 2-core host, the integration stage alone (21:08-22:12 UTC, in order: 130, 83, 340,
#: 408, 376, 676 and 1,605 s, 3,618 s in all)
STEPS: dict[str, float] = {
    "llama-cpp": 150,
    "llama-agentx": 100,
    "vllm-cpu": 380,
    "vllm-apis": 450,  # vLLM started, then three replays of one tree (chat, Responses, Messages)
    "gate-llama": 400,  # a warm-up run, five identical runs, one 1-thread run
    "sim-fit-llama": 740,  # a try: the fit run, the grid, two held-out runs
    "sim-fit-vllm": 1700,
}


def deadline() -> float | None:
    """The Unix time the integration stage must end by, or None (no limit)."""
    raw = os.environ.get(DEADLINE_ENV)
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise pytest.UsageError(f"{DEADLINE_ENV}={raw!r}: not a Unix time") from None


def time_left() -> float | None:
    """Seconds until the deadline (negative once past), or None without one."""
    end = deadline()
    return None if end is None else end - time.time()


def _times_file() -> Path:
    from agentbench.engines.locate import cache_dir

    return cache_dir() / "integration-times.json"


def _recorded() -> dict[str, float]:
    try:
        data = json.loads(_times_file().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items()
            if isinstance(k, str) and isinstance(v, (int, float)) and 0 < v < 86_400}


def expected(name: str) -> float:
    """How long step ``name`` is expected to take here (seconds)."""
    return max(STEPS[name], _recorded().get(name, 0.0))


def _record(name: str, seconds: float) -> None:
    times = _recorded()
    times[name] = round(seconds, 1)
    path = _times_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(times, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # an estimate not kept: the next run reads the figure in STEPS


def fits(name: str) -> bool:
    """Whether step ``name`` is expected to end before the deadline (always, without one)."""
    left = time_left()
    return left is None or left - MARGIN_S >= expected(name)


def shortfall(name: str) -> str:
    """'needs about N s, M s ... left': why step ``name`` does not fit."""
    left = (time_left() or 0.0) - MARGIN_S
    return (f"needs about {expected(name):.0f} s, {max(left, 0):.0f} s of the CI time for "
            f"integration tests left")


@contextlib.contextmanager
def step(name: str, what: str) -> Iterator[None]:
    """Run step ``name`` if it fits in the time left (else skip); keep how long it took
    when it ended without an error."""
    if not fits(name):
        pytest.skip(f"{what}: {shortfall(name)}")
    t0 = time.monotonic()
    yield
    _record(name, time.monotonic() - t0)
