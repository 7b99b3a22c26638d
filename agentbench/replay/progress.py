"""A tqdm progress line (sessions and requests done, errors, in flight, recent TTFT p50),
refreshed twice a second of wall time from counters; silent when stderr is not a terminal.

In a virtual-clock run the line also shows the simulated time reached, and the bar's
total (the requests the run plans, when known) gives tqdm's ETA in wall time."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from typing import Any


class Progress:
    def __init__(self, total_requests: int | None, enabled: bool | None = None,
                 virtual: bool = False) -> None:
        from tqdm import tqdm

        on = sys.stderr.isatty() if enabled is None else enabled
        self.bar = tqdm(total=total_requests, unit="req", disable=not on, dynamic_ncols=True,
                        file=sys.stderr, leave=True)
        self.virtual = virtual
        self._shown = 0

    def refresh(self, ctx: Any, stage: str) -> None:
        w = ctx.writer
        self.bar.update(w.n_requests - self._shown)
        self._shown = w.n_requests
        ttft = statistics.median(w.recent_ttft_ms) if w.recent_ttft_ms else None
        sim = ""
        if self.virtual:
            s = int(ctx.timers.now_ns() // 1_000_000_000)
            sim = f"sim={s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d} "
        self.bar.set_postfix_str(
            f"{stage} {sim}trees={ctx.trees_done} sessions={ctx.sessions_done} "
            f"err={w.n_errors} inflight={ctx.timers.inflight} ttft_p50="
            + (f"{ttft:.0f}ms" if ttft is not None else "-"), refresh=False)
        self.bar.refresh()

    async def loop(self, ctx: Any, stage_of: Any, stop: asyncio.Event) -> None:
        # virtual time: wake every simulated second, draw at most twice a wall second
        step = 1.0 if self.virtual else 0.5
        last = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now - last >= 0.5:
                self.refresh(ctx, stage_of())
                last = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), step)
        self.refresh(ctx, stage_of())

    def close(self) -> None:
        self.bar.close()


def planned_requests(scenario: Any, specs: list[Any], n_stages: int) -> int | None:
    """Requests the run will send, when its bounds tell (for the progress bar's ETA)."""
    lim = scenario.limits
    per: int | None = None
    if not lim.recycle:
        trees = specs[: lim.max_sessions] if lim.max_sessions else specs
        per = sum(len(s.turns) for t in trees for s in t.sessions)
    if lim.max_requests is not None:
        per = lim.max_requests if per is None else min(per, lim.max_requests)
    return None if per is None else per * n_stages
