"""Run the simulated cluster on a virtual clock: no sleeping, no HTTP. Used by the
benchmark (scheduling work per request) and by tests that need many simulated requests.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

from agentbench.sim.cluster import Cluster
from agentbench.sim.engine import Instance, SimRequest


def run_virtual(cluster: Cluster, schedule: Iterable[tuple[float, SimRequest]],
                start: float = 0.0) -> list[SimRequest]:
    """Submit each request at its simulated arrival time and step every instance until all
    are done; return the requests in completion order. Times continue from ``start``."""
    arrivals = sorted(schedule, key=lambda x: x[0])
    steps: list[tuple[float, int]] = []
    end_prev = [start] * len(cluster.instances)
    in_flight = [False] * len(cluster.instances)
    done: list[SimRequest] = []

    def begin(inst: Instance, t: float) -> None:
        at = max(t, end_prev[inst.index])
        dur = inst.plan(at)
        if dur is None and inst.waiting and not inst.running:
            at = max(at, inst.waiting[0].arrival)
            dur = inst.plan(at)
        if dur is not None:
            heapq.heappush(steps, (at + dur, inst.index))
            in_flight[inst.index] = True

    i = 0
    while i < len(arrivals) or steps:
        t_arr = arrivals[i][0] if i < len(arrivals) else math.inf
        if steps and steps[0][0] < t_arr:
            end, idx = steps[0]
            inst = cluster.instances[idx]
            done.extend(inst.commit(end))
            end_prev[idx] = end
            dur = inst.plan(end) if inst.has_work() else None
            if dur is not None:  # the common case: the next step follows at once
                heapq.heapreplace(steps, (end + dur, idx))
                continue
            heapq.heappop(steps)
            in_flight[idx] = False
            if inst.has_work():
                begin(inst, end)
        else:
            t, req = arrivals[i]
            i += 1
            inst = cluster.submit(req, at=t)
            if not in_flight[inst.index]:
                begin(inst, t)
    return done


def virtual_end(cluster: Cluster, done: list[SimRequest]) -> float:
    """Latest finish time among ``done`` (where a following sequential run may start)."""
    return max((r.finished_at or 0.0 for r in done), default=0.0)
