"""Stages of a run and what runs one, shared by the single-process runner (``runner``) and
the worker processes (``workers``): the sweep stages of a load, the tree sequence lanes and
arrivals draw from, a stage's lanes (closed loop) or arrivals (open loop) and its deadline.
Imports neither of those modules; what runs beside the lanes (the client-health watch, the
spool flusher) is in ``upkeep``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentbench.replay.context import RunContext, StageOver
from agentbench.replay.schedule import NS, arrival_offsets_ns, warmup_start_turn
from agentbench.replay.sigterm import stop_reason
from agentbench.replay.tree import TreeRun
from agentbench.replay.treespec import TreeSpec
from agentbench.replay.warmup import LaneWarmup
from agentbench.traces.model import Trace


@dataclass
class Stage:
    """One sweep stage: a label, closed-loop lanes or an open-loop arrival rate."""

    label: str
    lanes: int | None = None
    rate_per_s: float | None = None


def max_lanes(load: Any) -> int | None:
    """The most lanes of any stage of a closed-loop load; None for open loop."""
    if load.kind != "lanes":
        return None
    c = load.concurrency
    return max(c) if isinstance(c, list) else int(c)


def max_shards(load: Any) -> int | None:
    """The most processes a load can be sharded over (``Shard``): its most lanes, or an
    open loop's ``max_concurrency`` (each shard's cap is at least 1: two shards under a cap
    of 1 ran two trees at once); None: no bound."""
    lanes = max_lanes(load)
    return lanes if lanes is not None else getattr(load, "max_concurrency", None)


def stages_of(load: Any) -> list[Stage]:
    """One stage per value of the sweep, each labelled apart: a label met again (a value
    given twice, two rates alike to 6 digits) takes ``#2``, ``#3``; the requests' and
    the summary's stages are told by their labels (two ``c=8`` were one stage there)."""
    if load.kind == "lanes":
        vals = load.concurrency if isinstance(load.concurrency, list) else [load.concurrency]
        stages = [Stage(f"c={v}", lanes=v) for v in vals]
    elif load.arrival == "trace":
        return [Stage("trace")]
    else:
        rates = load.rate_per_s if isinstance(load.rate_per_s, list) else [load.rate_per_s]
        stages = [Stage(f"r={r:g}", rate_per_s=r) for r in rates]
    seen: dict[str, int] = {}
    for st in stages:
        seen[st.label] = n = seen.get(st.label, 0) + 1
        if n > 1:
            st.label = f"{st.label}#{n}"
    return stages


#: slots of a tree source's state (shared memory across worker processes)
STATE_SLOTS = 7


class TreeSource:
    """Trees in order; when the trace runs out, the next copy (a fresh cache-bust salt) when
    recycling is on. Each stage restarts at the first tree with copies never used before.

    The position state lives in ``state`` (``[pos, base, max copy + 1, ordinal, ordinal at
    the stage start, lanes warm, profiling start ns or -1]``, :mod:`.warmup`) behind
    ``lock``: a plain list in one process, shared memory when lanes are sharded over worker
    processes (:mod:`agentbench.replay.workers`), so every worker draws from one sequence
    and the request set is the single-process one."""

    def __init__(self, specs: list[TreeSpec], recycle: bool, state: Any = None,
                 lock: Any = None) -> None:
        self.specs = specs
        self.recycle = recycle
        self._s = state if state is not None else [0] * STATE_SLOTS
        self._lock = lock if lock is not None else contextlib.nullcontext()
        #: every lane of the stage runs in this process (no shared state): ``_warm`` is
        #: told when the last lane is warm instead of looking now and then
        self.local = state is None
        #: called when the last lane is warm (a local source's ``_warm`` sets it)
        self.on_warm: Callable[[], None] | None = None

    def restart(self) -> None:
        with self._lock:
            self._s[1] = self._s[2]
            self._s[0] = 0
            self._s[4] = self._s[3]
            self._s[5] = 0
            self._s[6] = -1

    def lane_warm(self, lanes: int, now_ns: int) -> None:
        """One more lane of the stage's ``lanes`` is warm; the last one starts the profiling
        phase at ``now_ns``."""
        with self._lock:
            self._s[5] += 1
            if self._s[5] >= lanes and self._s[6] < 0:
                self._s[6] = now_ns
                if self.on_warm is not None:
                    self.on_warm()

    def start_profiling(self, now_ns: int) -> int:
        """The profiling phase's start: the one already set, else ``now_ns`` (warmup ran
        out of time, or the stage has no warmup)."""
        with self._lock:
            if self._s[6] < 0:
                self._s[6] = now_ns
            return int(self._s[6])

    def profile_start_ns(self) -> int | None:
        with self._lock:
            return int(self._s[6]) if self._s[6] >= 0 else None

    def next(self, limit: int | None = None) -> tuple[TreeSpec, int, int] | None:
        """The next (tree, copy, ordinal); None when the trace (or ``limit`` trees of this
        stage) ran out. The ordinal counts trees over the whole run."""
        with self._lock:
            pos = self._s[0]
            if limit is not None and pos >= limit:
                return None
            item = self._take(pos)
            if item is not None:
                self._s[0] = pos + 1
            return item

    def at(self, pos: int) -> tuple[TreeSpec, int, int] | None:
        """The tree of stage position ``pos`` (open loop: arrival ``pos`` takes it)."""
        with self._lock:
            return self._take(pos)

    def _take(self, pos: int) -> tuple[TreeSpec, int, int] | None:
        n = len(self.specs)
        if n == 0 or (not self.recycle and pos >= n):
            return None
        spec, copy = self.specs[pos % n], self._s[1] + pos // n
        self._s[2] = max(self._s[2], copy + 1)
        ordinal = self._s[4] + pos
        self._s[3] = max(self._s[3], ordinal + 1)
        return spec, copy, ordinal


#: session trees in a row one lane may end without the clock moving before the run stops
#: (requests that all fail at once do that, and so does an engine whose steps take no
#: time with no think time between turns, such as the ``instant`` preset with
#: ``timing.time_scale: 0``; on a virtual clock nothing else would ever end the stage)
STANDSTILL_TREES = 200


@dataclass(frozen=True)
class Shard:
    """The part of a stage one process runs: its lanes (global lane numbers) and, in open
    loop, the arrivals ``k`` with ``k % count == index``; ``max_concurrency`` is split."""

    index: int = 0
    count: int = 1

    def lanes(self, n: int) -> list[int]:
        return list(range(self.index, n, self.count))

    def cap(self, total: int) -> int:
        return total // self.count + (1 if self.index < total % self.count else 0)


async def run_stage(ctx: RunContext, sc: Any, stage: Stage, k: int, source: TreeSource,
                     trace: Trace, shard: Shard = Shard(),
                     stage_start_ns: int | None = None) -> None:
    """Run one stage until its bound; at the deadline stop sending, and let in-flight
    requests finish or cancel them (``limits.on_deadline``). The deadline counts from
    ``stage_start_ns`` (default: now), so worker processes share one."""
    lim = sc.limits
    ctx.stage = stage.label
    ctx.stopping = ctx.budget_spent = False
    ctx.requests_sent = 0
    ctx.max_requests = lim.max_requests
    # insertion-ordered (a dict, not a set): cancelling at the deadline goes in start order,
    # so a virtual-time run's rows come out in the same order every time
    tasks: dict[asyncio.Task[Any], None] = {}
    warm = sc.warmup.enabled and (k == 0 or sc.warmup.every_stage)
    t_stage = ctx.timers.now_ns() if stage_start_ns is None else stage_start_ns

    stop_now = ctx.stop
    # a profiling phase after warmup needs a bound on the wait (duration_s or max_s):
    # without one, each lane measures once it is warm itself
    max_warm = sc.warmup.max_s or lim.duration_s
    if stage.lanes is not None:
        body = asyncio.ensure_future(_lanes(ctx, sc, shard.lanes(stage.lanes), source, warm,
                                            tasks, stage.lanes, bool(max_warm)))
    else:
        body = asyncio.ensure_future(_arrivals(ctx, sc, stage, k, source, trace, tasks, shard,
                                               t_stage))
    try:
        deadline = None
        t_profile = t_stage
        if stage.lanes is not None and warm and max_warm:
            t_profile = await _warm(ctx, source, body, t_stage, max_warm)
        t_profile = source.start_profiling(t_profile)
        if lim.duration_s is not None:
            deadline = max(0.0, lim.duration_s - (ctx.timers.now_ns() - t_profile) / NS)
        done, _ = await asyncio.wait({body}, timeout=deadline)
        if not done:
            stop_now()
            if lim.on_deadline == "cancel":
                for t in list(tasks):
                    t.cancel()
            await asyncio.gather(body, return_exceptions=True)
        elif body.exception() is not None:
            raise body.exception()  # type: ignore[misc]
    except BaseException as e:
        stop_now()
        if ctx.cancel_reason is None:  # not said where the stop began (SIGTERM, the writer)
            ctx.cancel_reason = stop_reason(e)
        for t in list(tasks):
            t.cancel()
        body.cancel()
        await asyncio.gather(body, *tasks, return_exceptions=True)
        raise


async def _warm(ctx: RunContext, source: TreeSource, body: asyncio.Future[Any],
                t_stage: int, max_s: float) -> int:
    """Wait until every lane of the stage is warm (:mod:`.warmup`), the lanes ended, or
    ``max_s`` passed since the stage start; return the profiling phase's start."""
    limit = t_stage + int(max_s * NS)
    while True:
        start = source.profile_start_ns()
        if start is not None:
            return start
        left = (limit - ctx.timers.now_ns()) / NS
        if left <= 0 or ctx.stopping:
            break
        # lanes of other worker processes count in shared memory, so look now and then: the
        # deadline counts from the instant the last lane was warm, not from this look; a
        # local source says when (a look every 0.1 s was a tenth of a virtual run's loop
        # callbacks)
        if not body.done():
            if source.local:
                await _until_warm(ctx, source, body, left)
            else:
                await asyncio.wait({body}, timeout=min(left, 0.1))
        elif body.cancelled() or body.exception() is not None:
            break
        else:  # this process's lanes ended; another's may still be warming up
            await asyncio.sleep(min(left, 0.1))
    return ctx.timers.now_ns()


async def _until_warm(ctx: RunContext, source: TreeSource, body: asyncio.Future[Any],
                      left: float) -> None:
    """Wait until the last lane is warm, the stage stops, ``body`` ends, or ``left``
    seconds pass (what a look every 0.1 s saw, each at its own instant)."""
    woken = asyncio.get_running_loop().create_future()

    def tell() -> None:
        if not woken.done():
            woken.set_result(None)

    source.on_warm = ctx.on_stop = tell
    try:
        await asyncio.wait({body, woken}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
    finally:
        source.on_warm = ctx.on_stop = None
        woken.cancel()


def _row_counts(ctx: RunContext) -> tuple[int, int]:
    """Request rows written so far: (failed, ok)."""
    w = ctx.writer
    return w.n_errors, w.n_requests - w.n_errors


async def _lanes(ctx: RunContext, sc: Any, lanes: list[int], source: TreeSource, warm: bool,
                 tasks: dict[asyncio.Task[Any], None], n_lanes: int, gated: bool) -> None:
    max_sessions = sc.limits.max_sessions

    w = sc.warmup

    async def lane(i: int) -> None:
        first = True
        lw = (LaneWarmup(w.requests_per_lane,
                         lambda: source.lane_warm(n_lanes, ctx.timers.now_ns()),
                         lambda: source.profile_start_ns() is not None,
                         gated=gated)
              if warm else None)
        still = 0  # trees in a row that ended without the clock moving
        failed0 = ok0 = 0  # the writer's failed and ok rows when the clock last moved
        try:
            while not ctx.stopping:
                item = source.next(max_sessions)
                if item is None:
                    return
                spec, copy, ordinal = item
                turns = spec.root.turns
                warm_turn = (warmup_start_turn(sc.seed, i, len(turns), w.random_start,
                                               w.start_min_ratio, w.start_max_ratio,
                                               [t.t for t in turns]
                                               if w.start_by == "time" else None)
                             if warm and first else None)
                first = False
                t0 = ctx.timers.now_ns()
                await TreeRun(ctx, spec, copy, i, warm_turn, ordinal, lw).run()
                still = still + 1 if ctx.timers.now_ns() == t0 else 0
                if not still:
                    failed0, ok0 = _row_counts(ctx)
                elif still >= STANDSTILL_TREES:
                    failed, ok = _row_counts(ctx)
                    ctx.standstill(still, failed - failed0, ok - ok0)
        finally:
            if lw is not None:
                lw.close()

    for i in lanes:
        t = asyncio.ensure_future(lane(i))
        tasks[t] = None
    await asyncio.gather(*tasks, return_exceptions=False)


async def _arrivals(ctx: RunContext, sc: Any, stage: Stage, k: int, source: TreeSource,
                    trace: Trace, tasks: dict[asyncio.Task[Any], None], shard: Shard,
                    t_stage: int) -> None:
    load = sc.load
    starts = [r.start_s for r in trace.roots()]
    offsets = arrival_offsets_ns(load.arrival, stage.rate_per_s, sc.seed, k, starts,
                                 sc.timing.time_scale)
    cap = (asyncio.Semaphore(max(1, shard.cap(load.max_concurrency)))
           if load.max_concurrency else None)
    duration_ns = int(sc.limits.duration_s * NS) if sc.limits.duration_s else None
    for arrivals, off in enumerate(offsets):
        if ctx.stopping:
            break
        if sc.limits.max_sessions is not None and arrivals >= sc.limits.max_sessions:
            break
        if duration_ns is not None and off > duration_ns:
            break
        if arrivals % shard.count != shard.index:
            if not source.recycle and arrivals >= len(source.specs):
                break
            continue
        target = t_stage + off
        try:
            await ctx.timers.wait_until(target, pullable=False)
        except StageOver:
            break
        if cap is not None:
            await cap.acquire()
        item = source.at(arrivals)
        if item is None:
            if cap is not None:
                cap.release()
            break
        spec, copy, ordinal = item
        tr = TreeRun(ctx, spec, copy, arrivals, None, ordinal)

        async def one(tr: TreeRun = tr, start: int = target) -> None:
            try:
                await tr.run(start_ns=start)
            finally:
                if cap is not None:
                    cap.release()

        t = asyncio.ensure_future(one())
        tasks[t] = None
        t.add_done_callback(lambda done: tasks.pop(done, None))
    while tasks:
        await asyncio.gather(*list(tasks), return_exceptions=True)
