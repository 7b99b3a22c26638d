"""Run the simulated cluster on a virtual clock: no sleeping, no HTTP.

- ``TimerDriver``: the cluster's instances stepped as timers of the running event loop,
  which in a virtual-time run is the replay's own (``agentbench.replay.clock``), so the
  engine and the agents share one simulated clock;
- ``run_virtual``: a fixed schedule of requests run to completion without an event loop
  (the scheduling benchmark, tests that need many simulated requests).

Both advance an instance whose next steps are certain a decode run at a time
(``decoderuns``), with the records of stepping it one step at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
from collections.abc import Callable, Iterable, Iterator

from agentbench.sim import decoderuns
from agentbench.sim.cluster import Cluster, plan_next
from agentbench.sim.decoderuns import DecodeRun, decode_run
from agentbench.sim.engine import Instance, SimRequest

#: steps computed ahead at a time by ``TimerDriver`` (arrivals elsewhere usually cut a run
#: short); ``run_virtual`` computes a run up to the step that finishes a request
RUN_STEPS = 256
UNBOUNDED = 1 << 62


class TimerDriver:
    """Steps each instance as loop timers: a busy instance's steps follow back to back; an
    idle one starts a step when a request arrives (``wake``). Same step rule as the
    wall-clock driver (``Cluster._drive``), without a task or a sleep per step.

    Decode runs: when an instance's next steps are all decode steps of one batch until a
    request finishes (``decoderuns.decode_run``), one timer covers them and their tokens
    are stamped at each step's end. Anything that reads or changes an instance's course
    (an arrival routed to it, an abort) first calls ``sync_one(i, t)``: the steps ended by
    ``t`` are committed, the one in progress is planned as it would have been, and the run
    ends there; so the records are those of stepping one step at a time. Routing reads only
    loads and caches, which a run does not change, and a metrics sample reads runs in
    place (``sampled``)."""

    def __init__(self, cluster: Cluster, loop: asyncio.AbstractEventLoop,
                 clock_ns: Callable[[], int] | None = None) -> None:
        self.cluster = cluster
        self.loop = loop
        #: the clock that stamps the tokens of requests that keep stamps (``token_ns``):
        #: the replay's, at each step's commit
        self.clock_ns = clock_ns
        n = len(cluster.instances)
        self.end_prev = [0.0] * n
        self.handles: list[asyncio.TimerHandle | None] = [None] * n
        self.runs: list[DecodeRun | None] = [None] * n

    def start(self) -> None:
        self.cluster.driver = self

    def close(self) -> None:
        for h in self.handles:
            if h is not None:
                h.cancel()
        self.handles = [None] * len(self.handles)
        self.cluster.driver = None

    @contextlib.contextmanager
    def sampled(self, t: float) -> Iterator[None]:
        """The instances as a metrics sample at ``t`` reads them, without cutting their
        decode runs where that is exact: during a run only ``generation_tokens`` of a
        paged instance's sampled figures moves (its load, queue, KV blocks and counters
        of prompts, hits and finishes wait for the run's last step), so the tokens of the
        steps ended by ``t`` are added for the sample and taken back. Other instances (a
        slots instance's KV use counts generated tokens) are synced as for any read."""
        added: list[tuple[Instance, int]] = []
        for i, run in enumerate(self.runs):
            if run is None:
                continue
            inst = self.cluster.instances[i]
            if type(inst) is not Instance or inst._dirty:
                self.sync_one(i, t)
                continue
            m = decoderuns.ended_steps(run, t, True)  # what ``sync_one``'s cut commits
            tokens = len(inst.decoding) * (m - run.applied) if m > run.applied else 0
            inst.stats.generation_tokens += tokens
            added.append((inst, tokens))
        try:
            yield
        finally:
            for inst, tokens in added:
                inst.stats.generation_tokens -= tokens

    def sync_one(self, i: int, t: float) -> None:
        """Cut instance ``i``'s decode run at ``t`` (before its state is read or changed):
        an arrival routed to it. Routing itself reads no run: a run changes neither an
        instance's load nor its caches (``decoderuns``)."""
        run = self.runs[i]
        if run is None:
            return
        end = decoderuns.cut(self.cluster.instances[i], run, t, True)
        self.runs[i] = None
        h = self.handles[i]
        if h is not None:
            h.cancel()
        self.handles[i] = self.loop.call_at(end, self._done, i, end)

    def wake(self, i: int) -> None:
        if self.handles[i] is None:
            self._begin(i, max(self.end_prev[i], self.cluster.now()))

    def _run_end(self, i: int) -> None:
        run = self.runs[i]
        assert run is not None
        self.runs[i] = None
        inst = self.cluster.instances[i]
        if not run.finishes:  # a run cut at RUN_STEPS: commit it, go on
            decoderuns.apply(inst, run, run.steps)
            self.end_prev[i] = run.end
            self._begin(i, run.end)
            return
        self._done(i, decoderuns.last_step(inst, run))  # the last step, as usual

    def _begin(self, i: int, start: float) -> None:
        inst = self.cluster.instances[i]
        run = decode_run(inst, start, RUN_STEPS)
        if run is not None:
            self.runs[i] = run
            self.handles[i] = self.loop.call_at(run.end, self._run_end, i)
            return
        step = plan_next(inst, start)
        if step is None:
            self.handles[i] = None
            return
        end = step[0] + step[1]
        self.handles[i] = self.loop.call_at(end, self._done, i, end)

    def _done(self, i: int, end: float) -> None:
        cl = self.cluster
        inst = cl.instances[i]
        done = inst.commit(end, None if self.clock_ns is None else self.clock_ns())
        if done and cl.finished_log is not None:
            cl.finished_log.extend(done)
        self.end_prev[i] = end
        if inst.handed:  # P/D: prefills ended (routing reads no decode run)
            for r, j in cl.hand_over(inst, end):
                self.loop.call_at(r.arrival, self._arrive, r, j)
        self._begin(i, end)

    def _arrive(self, req: SimRequest, j: int) -> None:
        self.sync_one(j, req.arrival)  # the request changes instance j's course
        self.cluster.arrive(req, j)


def run_virtual(cluster: Cluster, schedule: Iterable[tuple[float, SimRequest]],
                start: float = 0.0) -> list[SimRequest]:
    """Submit each request at its simulated arrival time and step every instance until all
    are done; return the requests in completion order. Times continue from ``start``.

    Each instance has one pending event in a heap keyed (end, instance), the end of its
    step in progress or of its decode run; an arrival routed to an instance in a run cuts
    the run where it is (nothing else reads an instance during a run: routing sees its
    load and caches, which a run does not change). Requests' ``on_progress`` is called
    once per run of steps."""
    if cluster.pd is not None:
        raise ValueError("run_virtual runs aggregated instances only (P/D: TimerDriver)")
    arrivals = sorted(schedule, key=lambda x: x[0])
    instances = cluster.instances
    n = len(instances)
    steps: list[tuple[float, int]] = []
    end_prev = [start] * n
    in_flight = [False] * n
    runs: list[DecodeRun | None] = [None] * n
    done: list[SimRequest] = []
    heapreplace, apply, last_step = heapq.heapreplace, decoderuns.apply, decoderuns.last_step

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
    n_arr = len(arrivals)
    t_arr = arrivals[0][0] if n_arr else math.inf
    while steps or i < n_arr:
        if steps and steps[0][0] < t_arr:
            end, idx = steps[0]
            inst = instances[idx]
            run = runs[idx]
            if run is None:
                fin = inst.commit(end)
                if fin:
                    done.extend(fin)
            else:
                runs[idx] = None
                if run.finishes:
                    last_step(inst, run)
                    done.extend(inst.commit(end))
                else:
                    apply(inst, run, run.steps)
            end_prev[idx] = end
            if inst.has_work():
                run = None if inst.prefilling else decode_run(inst, end, UNBOUNDED)
                if run is not None:
                    runs[idx] = run
                    heapreplace(steps, (run.end, idx))
                    continue
                dur = inst.plan(end)
                if dur is not None:  # the common case: the next step follows at once
                    heapreplace(steps, (end + dur, idx))
                    continue
            heapq.heappop(steps)
            in_flight[idx] = False
            if inst.has_work():
                begin(inst, end)
        else:
            t, req = arrivals[i]
            i += 1
            t_arr = arrivals[i][0] if i < n_arr else math.inf
            idx = cluster.route(req, at=t)
            run = runs[idx]
            if run is not None:  # its step in progress at t, planned before the arrival
                runs[idx] = None
                end = decoderuns.cut(instances[idx], run, t, False)
                if end != run.end:
                    pos = next(p for p, e in enumerate(steps) if e[1] == idx)
                    steps[pos] = (end, idx)
                    heapq.heapify(steps)
            inst = cluster.place(req, idx)
            if not in_flight[idx]:
                begin(inst, t)
    return done


def virtual_end(cluster: Cluster, done: list[SimRequest]) -> float:
    """Latest finish time among ``done`` (where a following sequential run may start)."""
    return max((r.finished_at or 0.0 for r in done), default=0.0)
