"""A tqdm progress line (sessions and requests done, errors, in flight, recent TTFT p50),
refreshed twice a second from counters; silent when stderr is not a terminal."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
from typing import Any


class Progress:
    def __init__(self, total_requests: int | None, enabled: bool | None = None) -> None:
        from tqdm import tqdm

        on = sys.stderr.isatty() if enabled is None else enabled
        self.bar = tqdm(total=total_requests, unit="req", disable=not on, dynamic_ncols=True,
                        file=sys.stderr, leave=True)
        self._shown = 0

    def refresh(self, ctx: Any, stage: str) -> None:
        w = ctx.writer
        self.bar.update(w.n_requests - self._shown)
        self._shown = w.n_requests
        ttft = statistics.median(w.recent_ttft_ms) if w.recent_ttft_ms else None
        self.bar.set_postfix_str(
            f"{stage} trees={ctx.trees_done} sessions={ctx.sessions_done} err={w.n_errors} "
            f"inflight={ctx.timers.inflight} ttft_p50="
            + (f"{ttft:.0f}ms" if ttft is not None else "-"), refresh=False)
        self.bar.refresh()

    async def loop(self, ctx: Any, stage_of: Any, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.refresh(ctx, stage_of())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        self.refresh(ctx, stage_of())

    def close(self) -> None:
        self.bar.close()
