"""Run the simulated cluster on a virtual clock: no sleeping, no HTTP.

- ``TimerDriver``: the cluster's instances stepped as timers of the running event loop,
  which in a virtual-time run is the replay's own (``agentbench.replay.clock``), so the
  engine and the agents share one simulated clock;
- ``run_virtual``: a fixed schedule of requests run to completion without an event loop
  (the scheduling benchmark, tests that need many simulated requests).
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import math
from collections.abc import Iterable

from agentbench.sim.cluster import Cluster, plan_next
from agentbench.sim.engine import Instance, SimRequest

#: steps computed ahead at a time (arrivals elsewhere usually cut a run short)
RUN_STEPS = 32


class TimerDriver:
    """Steps each instance as loop timers: a busy instance's steps follow back to back; an
    idle one starts a step when a request arrives (``wake``). Same step rule as the
    wall-clock driver (``Cluster._drive``), without a task or a sleep per step.

    Decode runs: when an instance's next steps are all decode steps of one batch until a
    request finishes (``Instance.decode_run``), one timer covers them and their tokens
    are stamped at each step's end. Anything that reads or changes an instance (an
    arrival, an abort, a metrics sample) first calls ``sync(t)``: the steps ended by ``t``
    are committed, the one in progress is planned as it would have been, and the run ends
    there; so the records are those of stepping one step at a time."""

    def __init__(self, cluster: Cluster, loop: asyncio.AbstractEventLoop) -> None:
        self.cluster = cluster
        self.loop = loop
        n = len(cluster.instances)
        self.end_prev = [0.0] * n
        self.handles: list[asyncio.TimerHandle | None] = [None] * n
        self.runs: list[list[float] | None] = [None] * n  # [start, end 1, ..., end K]
        self.applied = [0] * n  # steps of the run committed so far
        self.run_finishes = [False] * n  # whether a run's last step finishes a request

    def start(self) -> None:
        self.cluster.driver = self

    def close(self) -> None:
        for h in self.handles:
            if h is not None:
                h.cancel()
        self.handles = [None] * len(self.handles)
        self.cluster.driver = None

    def sync(self, t: float) -> None:
        """Bring every instance's state up to simulated time ``t`` (before it is read)."""
        for i, run in enumerate(self.runs):
            if run is None:
                continue
            k = len(run) - 1
            m = min(bisect.bisect_right(run, t, 1) - 1, k - 1)  # steps ended by t
            self._apply(i, m)
            start = run[m]  # the step in progress, planned as it was at its start
            dur = self.cluster.instances[i].plan(start)
            assert dur is not None
            self.runs[i] = None
            h = self.handles[i]
            if h is not None:
                h.cancel()
            self.handles[i] = self.loop.call_at(start + dur, self._done, i, start + dur)

    def wake(self, i: int) -> None:
        if self.handles[i] is None:
            self._begin(i, max(self.end_prev[i], self.cluster.now()))

    def _apply(self, i: int, upto: int) -> None:
        run, a = self.runs[i], self.applied[i]
        if run is not None and upto > a:
            stamp = [round(e * 1e9) for e in run[a + 1:upto + 1]]
            self.cluster.instances[i].apply_decode_steps(run[a:upto + 1], upto - a, stamp)
            self.applied[i] = upto

    def _run_end(self, i: int) -> None:
        run = self.runs[i]
        assert run is not None
        k = len(run) - 1
        if not self.run_finishes[i]:  # a run cut at RUN_STEPS: commit it, go on
            self._apply(i, k)
            self.runs[i] = None
            self.end_prev[i] = run[k]
            self._begin(i, run[k])
            return
        self._apply(i, k - 1)
        self.runs[i] = None
        dur = self.cluster.instances[i].plan(run[k - 1])  # the last step, as usual
        assert dur is not None
        self._done(i, run[k - 1] + dur)

    def _begin(self, i: int, start: float) -> None:
        inst = self.cluster.instances[i]
        ends, finishes = inst.decode_run(start, RUN_STEPS)
        if len(ends) > 1:
            self.runs[i] = [start, *ends]
            self.applied[i] = 0
            self.run_finishes[i] = finishes
            self.handles[i] = self.loop.call_at(ends[-1], self._run_end, i)
            return
        step = plan_next(inst, start)
        if step is None:
            self.handles[i] = None
            return
        end = step[0] + step[1]
        self.handles[i] = self.loop.call_at(end, self._done, i, end)

    def _done(self, i: int, end: float) -> None:
        cl = self.cluster
        done = cl.instances[i].commit(end)
        if done and cl.finished_log is not None:
            cl.finished_log.extend(done)
        self.end_prev[i] = end
        self._begin(i, end)


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
