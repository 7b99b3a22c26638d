"""Collecting an endpoint's server metrics during the run into ``server_metrics.parquet``
rows, with the collector its transport gives (``agentbench.transport.scrape``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agentbench.replay.clock import Pause, VirtualEventLoop
from agentbench.transport.base import Rows

#: loop turns between a pause's end and the next sample with the ``wait_for`` pause this
#: loop had (its task cancelled and awaited), kept so that a sample at the instant of
#: other events (a stage's deadline) reads the state it always read
_TURNS = 3


async def scrape_loop(collect: Callable[[int], Awaitable[Rows | None]], interval_s: float,
                      now_ns: Callable[[], int], sink: Callable[[Rows], None],
                      stop: asyncio.Event) -> int:
    """Collect samples every ``interval_s`` until ``stop`` is set (and once more then);
    return the number of scrapes. Stops at once when the first one finds no metrics. The
    pauses share one waiter on ``stop`` (``Pause``): a ``wait_for`` a pause made a task and
    cancelled it, six loop callbacks a sample where this makes two (a virtual-time run
    samples every few simulated seconds: the quickstart has more samples than requests)."""
    n = 0
    pause = Pause(stop)
    loop = asyncio.get_running_loop()
    virtual = loop if isinstance(loop, VirtualEventLoop) else None
    try:
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
            await pause.until_stop(interval_s)
            # the sample comes as many turns after its time as ever, unless nothing else
            # is at this instant of a virtual clock (those turns would run nothing else)
            if not stop.is_set() and not (virtual is not None and virtual.alone()):
                for _ in range(_TURNS):
                    await asyncio.sleep(0)
    finally:
        pause.close()
