"""A tqdm progress line: the share of the run done, sessions done / total, requests,
errors, in flight, recent TTFT p50 and an ETA, refreshed twice a second of wall time from
counters. When stderr is not a terminal (a CI log, a pipe) and progress was not switched
off, the same text is printed as one line every ``LINE_EVERY_S`` wall seconds instead.

The share done is the furthest of the run's bounds (per stage: ``limits.duration_s`` on
the run's clock, ``max_requests``, ``max_sessions`` or the trace's trees when it is not
recycled), which is where a stage ends; the ETA extrapolates the wall time spent so far.
Times on the line are in the run's time base: a virtual-clock run shows the simulated
time reached and its TTFT as simulated (``sim``); a wall-clock run against simulators at a
speedup shows TTFT scaled to simulated time as its summary does; a run that mixes time
bases shows no TTFT."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NS = 1_000_000_000
#: wall seconds between two progress lines off a terminal
LINE_EVERY_S = 10.0


@dataclass(frozen=True)
class Plan:
    """What the run's bounds tell about its end, per stage (None: not bounded that way)."""

    stages: int
    trees: int | None
    requests: int | None
    duration_ns: int | None
    #: recorded (run-clock) TTFT x this is TTFT in the run's time base; None: not shown
    ttft_factor: float | None = 1.0
    #: the run's times are simulated (virtual clock, or simulators at a speedup)
    simulated: bool = False
    #: the run's clock is simulated: show the simulated time reached
    virtual: bool = False


@dataclass(frozen=True)
class Counts:
    """The counters the line is drawn from, at one moment."""

    trees: int = 0
    sessions: int = 0
    requests: int = 0
    errors: int = 0
    inflight: int = 0
    now_ns: int = 0
    ttft_ms: float | None = None  # recent median, on the run's clock


def plan_of(scenario: Any, specs: list[Any], n_stages: int) -> Plan:
    """The bar's plan for ``scenario`` replaying the trees ``specs`` in ``n_stages``."""
    lim = scenario.limits
    trees: int | None = None
    requests: int | None = None
    if not lim.recycle:
        kept = specs[: lim.max_sessions] if lim.max_sessions else specs
        trees = len(kept)
        requests = sum(len(s.turns) for t in kept for s in t.sessions)
    elif lim.max_sessions is not None:
        trees = lim.max_sessions
    if lim.max_requests is not None:
        requests = lim.max_requests if requests is None else min(requests, lim.max_requests)
    virtual = scenario.clock_mode == "virtual"
    factor: float | None = 1.0
    simulated = virtual
    if not virtual:
        sims, all_simulated = scenario.simulator_speedups
        if len(sims) == 1 and all_simulated:
            factor, simulated = sims.pop(), True  # the summary scales these by the speedup
        elif sims:
            factor = None  # mixed time bases: no single TTFT to show
    return Plan(stages=n_stages, trees=trees, requests=requests,
                duration_ns=None if lim.duration_s is None else int(lim.duration_s * NS),
                ttft_factor=factor, simulated=simulated, virtual=virtual)


def fraction(plan: Plan, stage: int, start: Counts, now: Counts) -> float:
    """Share of the run done: finished stages plus the current stage's furthest bound
    (capped below 1 until the stage ends: a deadline may let requests finish)."""
    shares = []
    if plan.trees:
        shares.append((now.trees - start.trees) / plan.trees)
    if plan.requests:
        shares.append((now.requests - start.requests) / plan.requests)
    if plan.duration_ns:
        shares.append((now.now_ns - start.now_ns) / plan.duration_ns)
    done = min(max(shares, default=0.0), 0.999)
    return min(1.0, (stage + max(done, 0.0)) / max(plan.stages, 1))


def clock(seconds: float) -> str:
    """``h:mm:ss`` (``m:ss`` under an hour)."""
    s = max(int(seconds), 0)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 \
        else f"{s // 60:d}:{s % 60:02d}"


def describe(plan: Plan, stage: int, label: str, start: Counts, now: Counts,
             wall_s: float) -> tuple[float, str]:
    """The share done and the line's text after ``wall_s`` wall seconds of the run."""
    share = fraction(plan, stage, start, now)
    parts = [label] if label else []
    sessions = f"sessions {now.trees:,}"
    if plan.trees:
        sessions += f"/{plan.trees * plan.stages:,}"
    if now.sessions > now.trees:
        sessions += f" (+{now.sessions - now.trees:,} subagents)"
    parts.append(sessions)
    reqs = f"req {now.requests:,}"
    if plan.requests:
        reqs += f"/{plan.requests * plan.stages:,}"
    parts.append(f"{reqs} err {now.errors:,} in flight {now.inflight:,}")
    if plan.virtual:
        parts.append(f"sim time {clock(now.now_ns / NS)}")
    if now.ttft_ms is not None and plan.ttft_factor is not None:
        ms = now.ttft_ms * plan.ttft_factor
        shown = f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"
        parts.append(f"TTFT p50 {shown}{' (sim)' if plan.simulated else ''}")
    eta = clock(wall_s * (1 - share) / share) if share >= 0.005 else "?"
    parts.append(f"{clock(wall_s)} elapsed, ETA {eta}")
    return share, " | ".join(parts)


def counts_of(ctx: Any, now_ns: int) -> Counts:
    """Counters from a ``RunContext`` (or a worker fleet's view of one)."""
    w = ctx.writer
    ttft = statistics.median(w.recent_ttft_ms) if w.recent_ttft_ms else None
    return Counts(trees=ctx.trees_done, sessions=ctx.sessions_done, requests=w.n_requests,
                  errors=w.n_errors, inflight=ctx.timers.inflight, now_ns=now_ns,
                  ttft_ms=ttft)


class Progress:
    """The bar: ``begin_stage`` at each stage, ``loop`` in the background, ``close``."""

    STEPS = 1000

    def __init__(self, plan: Plan, now_ns: Callable[[], int],
                 enabled: bool | None = None) -> None:
        from tqdm import tqdm

        has_stderr = sys.stderr is not None  # not with ``2>&-``: nothing to draw on
        tty = has_stderr and sys.stderr.isatty()
        on = has_stderr and (tty if enabled is None else enabled)
        #: off a terminal, unless told otherwise: the line's text every LINE_EVERY_S
        self.lines = has_stderr and enabled is None and not tty
        self.last_line = time.monotonic()
        #: whether anything is shown (a bar, or lines): else ``loop`` need not run
        self.shown = on or self.lines
        self.bar = tqdm(total=self.STEPS, disable=not on, dynamic_ncols=True,
                        file=sys.stderr, leave=True,
                        bar_format="{percentage:3.0f}%|{bar:20}| {desc}")
        self.plan = plan
        self.now_ns = now_ns
        self.wall_t0 = time.monotonic()
        self.stage = (0, "", Counts())
        self.done = False

    def begin_stage(self, ctx: Any, k: int, label: str) -> None:
        self.stage = (k, label, counts_of(ctx, self.now_ns()))

    def refresh(self, ctx: Any) -> None:
        k, label, start = self.stage
        now = time.monotonic()
        share, text = describe(self.plan, k, label, start, counts_of(ctx, self.now_ns()),
                               now - self.wall_t0)
        if self.lines:
            if now - self.last_line >= LINE_EVERY_S:
                print(f"progress {round(share * 100):3d}% | {text}", file=sys.stderr,
                      flush=True)
                self.last_line = now
            return
        self.bar.n = self.STEPS if self.done else round(share * self.STEPS)
        self.bar.set_description_str(text, refresh=False)
        self.bar.refresh()

    async def loop(self, ctx: Any, stop: asyncio.Event) -> None:
        # wall-clock runs (a virtual-time run draws as its rows come: ResultsWriter.on_tick)
        step = 0.5
        last = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now - last >= 0.5:
                self.refresh(ctx)
                last = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), step)
        self.refresh(ctx)

    def complete(self) -> None:
        """Every stage ran to its end: the bar shows 100%."""
        self.done = True

    def close(self) -> None:
        self.bar.close()
