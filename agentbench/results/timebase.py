"""The time base of a run's figures: wall-clock, or simulated time when every endpoint is
the embedded simulator at one ``speedup`` S.

A simulator at speedup S divides every simulated duration by S, and a scenario that sets
``timing.time_scale = 1/S`` compresses think times alike, so the whole run is reality
played S times faster. Server-side durations are then reported as measured x S (TTFT,
TPOT, ITL, E2E, window, makespan, LLM wait) and rates as measured / S (throughput,
interactivity); cost follows the window. Schedule lag is the client's own delay, in wall
time. With real servers, or real and simulated mixed, or simulators at different
speedups, figures stay in wall-clock time and the note says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from agentbench.scenario.endpoints import is_simulated

WALL = "wall"
SIMULATED = "simulated"
VIRTUAL = "virtual"


@dataclass(frozen=True)
class TimeBase:
    """``factor``: multiply a measured wall duration by it to get the reported one."""

    kind: str = WALL
    factor: float = 1.0
    speedup: float | None = None
    note: str = "wall-clock time"
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "speedup": self.speedup, "factor": self.factor,
                "note": self.note, "warnings": list(self.warnings)}

    def label(self) -> str:
        """One short phrase for headers: 'virtual time', 'simulated time (speedup 100x)' or
        'wall-clock'."""
        if self.kind == VIRTUAL:
            return "virtual time (simulated; host load does not move it)"
        if self.kind == SIMULATED:
            return f"simulated time (speedup {self.speedup:g}x; schedule lag in wall time)"
        return "wall-clock time"


def _num(x: Any, default: float) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else default


def time_base(run: dict[str, Any]) -> TimeBase:
    """The time base of a run from its run.json (the scenario's endpoints and timing)."""
    tb = _base(run)
    pulled = _num(run.get("idle_pulled_in_ns"), 0.0)
    if pulled <= 0:
        return tb
    sim = f", {pulled * tb.factor / 1e9:,.0f} s simulated" if tb.kind == SIMULATED else ""
    what = "simulated time" if tb.kind == VIRTUAL else "wall time"
    return replace(tb, warnings=[*tb.warnings, (
        f"idle gaps pulled in by {pulled / 1e9:,.1f} s of {what}{sim} "
        "(timing.idle_cap_s): windows and makespans leave that idle time out")])


VIRTUAL_NOTE = ("the replay and the embedded simulator ran on one simulated "
                "clock in one process, without HTTP; every time (TTFT, TPOT, ITL, E2E, "
                "schedule lag, window, makespan) is simulated, so the same scenario and seed "
                "give the same figures whatever the host's load")


def _base(run: dict[str, Any]) -> TimeBase:
    if run.get("time_base") == VIRTUAL:
        return TimeBase(kind=VIRTUAL, factor=1.0, note=VIRTUAL_NOTE)
    tb = _wall_base(run)
    if tb.kind == SIMULATED:
        return replace(tb, warnings=[*tb.warnings, (
            "clock: wall: the simulator answered over HTTP in scaled real time, so the "
            "host's load moves these figures (by up to speedup x the client's delays); "
            "virtual time (the default for simulated endpoints) does not")])
    return tb


def _wall_base(run: dict[str, Any]) -> TimeBase:
    sc = run.get("scenario")
    eps = sc.get("endpoints") if isinstance(sc, dict) else None
    if not isinstance(eps, list) or not eps or not all(isinstance(e, dict) for e in eps):
        return TimeBase(note="wall-clock time (run.json names no endpoints)")
    sims = [e for e in eps if is_simulated(e)]
    if not sims:
        return TimeBase(note="wall-clock time (real servers)")
    speedups = sorted({_num(e.get("speedup"), 1.0) for e in sims})
    if len(sims) < len(eps):
        return TimeBase(note="wall-clock time: the run mixes real and simulated endpoints "
                        f"(simulated at speedup {', '.join(f'{s:g}' for s in speedups)}x); "
                        "simulated servers' durations are compressed by their speedup")
    if len(speedups) > 1:
        return TimeBase(note="wall-clock time: simulated endpoints run at different speedups "
                        f"({', '.join(f'{s:g}' for s in speedups)}x)")
    s = speedups[0]
    note = (f"simulated time: the simulator ran {s:g}x faster than real time, so server-side "
            f"durations (TTFT, TPOT, ITL, E2E, window, makespan, LLM wait) are measured x "
            f"{s:g} and rates (throughput, interactivity) measured / {s:g}; cost follows the "
            "window; schedule lag, a delay of the client itself, stays in wall time (client "
            "overhead inside a window or an E2E is scaled with it; tokens that reach the client "
            f"in one read show ITL 0, so ITL below about 1 ms wall, {s:g} ms simulated, is not "
            "resolved)")
    warnings = []
    timing = sc.get("timing") if isinstance(sc, dict) else None
    ts = _num(timing.get("time_scale"), 1.0) if isinstance(timing, dict) else 1.0
    if not math.isclose(ts * s, 1.0, rel_tol=1e-6):
        think = "removed" if ts == 0 else f"compressed {1 / ts:g}x"
        warnings.append(f"timing.time_scale {ts:g} is not 1/speedup ({1 / s:g}): think times "
                        f"are {think} but server times {s:g}x, so makespans, windows, "
                        "throughput and cost mix two time scales")
    return TimeBase(kind=SIMULATED, factor=s, speedup=s, note=note, warnings=warnings)
