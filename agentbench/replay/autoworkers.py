"""``--workers auto``: as many client processes as the streamed events need.

One client process handles the socket reads of every stream in its lanes. Measured with
``benchmarks/client_bench.py --sections capacity`` (256 lanes, a server with a 50 ms TTFT
and 64-192 output tokens, one pinned client core, 2-CPU x86_64 machines;
docs/performance.md), the schedule lag after each lane's first request stays at p99
under 5 ms up to: 54,000 streamed events/s (2026-12-01 05:58 UTC, load 0.1; 71,000 gave
13 ms) and 40,000 on a slower machine (07:56 UTC, load 0.9: 4.6 ms; 54,000 gave 6.2 ms).
``EVENTS_PER_WORKER`` keeps each process under the lower of those rates.

Before the run, one short streamed request per endpoint (``Transport.stream_rate``)
measures how fast a stream delivers token events (after its first); the offered rate is
at most lanes x that rate (each stream decodes no faster under load than alone), and ``auto`` takes
``ceil(offered / EVENTS_PER_WORKER)`` processes, no more than the CPUs this process may use
(one fewer when a simulated endpoint runs in this process) or the lanes. After the run,
``client_saturated`` in summary.json says whether that was enough.
"""

from __future__ import annotations

import math
import os
from typing import Any

#: streamed token events per second one client process sustains (see the module doc)
EVENTS_PER_WORKER = 40_000


def choose(rates: list[float | None], lanes: int | None, sim_in_process: bool,
           cpus: int | None = None) -> dict[str, Any]:
    """The worker count for ``auto`` from each endpoint's stream rate and the most lanes
    of the run (None: open loop), with the figures behind it (run.json's
    ``workers_auto``)."""
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    cap = max(1, cpus - (1 if sim_in_process else 0))
    if lanes is not None:
        cap = min(cap, lanes)
    known = [r for r in rates if r is not None]
    offered = None
    if lanes is None:
        n, why = cap, "open loop: one process per CPU"
    elif not known:
        n, why = cap, "no stream rate measured: one process per CPU"
    else:
        offered = lanes * max(known)
        need = math.ceil(offered / EVENTS_PER_WORKER)
        n = max(1, min(cap, need))
        why = (f"{lanes} lanes x {max(known):,.0f} events/s per stream = {offered:,.0f} "
               f"events/s at most; {EVENTS_PER_WORKER:,} per process")
        if need > cap:
            why += f"; capped at {cap} (CPUs and lanes)"
    return {"workers": n, "stream_events_per_s": [None if r is None else round(r, 1)
                                                  for r in rates],
            "offered_events_per_s": None if offered is None else round(offered),
            "events_per_worker": EVENTS_PER_WORKER, "cpus": cpus, "why": why}
