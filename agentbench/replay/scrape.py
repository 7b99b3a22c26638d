"""Collecting an endpoint's server metrics during the run into ``server_metrics.parquet``
rows, with the collector its transport gives (``agentbench.transport.scrape``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from agentbench.transport.base import Rows


async def scrape_loop(collect: Callable[[int], Awaitable[Rows | None]], interval_s: float,
                      now_ns: Callable[[], int], sink: Callable[[Rows], None],
                      stop: asyncio.Event) -> int:
    """Collect samples every ``interval_s`` until ``stop`` is set (and once more then);
    return the number of scrapes. Stops at once when the first one finds no metrics."""
    n = 0
    while True:
        rows = await collect(now_ns())
        if rows is None:
            if n == 0:
                return 0
        else:
            sink(rows)
            n += 1
        if stop.is_set():
            return n
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
