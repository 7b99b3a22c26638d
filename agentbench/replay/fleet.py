"""The parent's side of ``--workers N`` (``agentbench.replay.workers`` is the workers'):
start the worker processes, run each stage in all of them, follow their progress through
shared memory, stop them, and merge their rows into the run folder."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
from pathlib import Path
from typing import Any

from agentbench.replay.context import merged_outcomes
from agentbench.replay.shared import _STATS, Counters, Shared, failure_reason
from agentbench.replay.workers import WorkerSpec, _listen, start_method, worker_main
from agentbench.results.spool import WORKERS_DIR, merge_parts


class Fleet:
    """The parent's handle on its worker processes."""

    def __init__(self, n: int, scenario: Any, trace: Any, found: list[dict[str, Any]],
                 t0_ns: int, run_dir: Path) -> None:
        self.n = n
        self.mp: Any = multiprocessing.get_context(start_method())
        self.shared = Shared(self.mp, n)
        self.source = self.shared.tree_source([], scenario.limits.recycle)
        self.dir = run_dir / WORKERS_DIR
        self.specs = [WorkerSpec(w, n, scenario, trace, found, t0_ns, str(self.dir / f"w{w}"),
                                 os.getpid()) for w in range(n)]
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.inboxes: list[asyncio.Queue[tuple[Any, ...]]] = []
        self.closed: list[dict[str, Any]] = []
        self.outcomes: list[dict[str, Any]] = []  # each worker's ``RunContext.outcome``

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for spec in self.specs:
            mine, theirs = self.mp.Pipe()
            p = self.mp.Process(target=worker_main, args=(spec, theirs, self.shared),
                                name=f"agentbench-worker-{spec.index}", daemon=True)
            p.start()
            theirs.close()
            inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
            _listen(loop, mine, inbox)
            self.procs.append(p)
            self.conns.append(mine)
            self.inboxes.append(inbox)
        await self._all("ready")

    async def _get(self, w: int, timeout: float | None = None) -> tuple[Any, ...]:
        """The next message of worker ``w``; ``("eof",)`` once it is gone (a pipe end
        handed to a spawned child stays open in this process until the child took it, so
        a worker that died early is noticed by its exit, not by end-of-file)."""
        q = self.inboxes[w]
        t_end = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while True:
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(q.get(), 0.2)
            if not self.procs[w].is_alive() and q.empty():
                return ("eof",)
            if t_end is not None and asyncio.get_running_loop().time() > t_end:
                return ("timeout",)

    async def _all(self, kind: str) -> list[tuple[Any, ...]]:
        """Each worker's next message, which must be ``kind``. A worker that answers
        anything else (it closed: its disk refused the results; it died) raises at once,
        not once the workers before it finished their stage."""
        gets: dict[asyncio.Future[tuple[Any, ...]], int] = {
            asyncio.ensure_future(self._get(w)): w for w in range(self.n)}
        pending: set[asyncio.Future[tuple[Any, ...]]] = set(gets)
        try:
            while pending:
                done, pending = await asyncio.wait(pending,
                                                   return_when=asyncio.FIRST_COMPLETED)
                answers = sorted((gets[t], t.result()) for t in done)
                for _, msg in answers:
                    self._keep_closed(msg)
                bad = [(w, msg) for w, msg in answers if msg[0] != kind]
                if bad:
                    w, msg = bad[0]
                    raise RuntimeError(f"replay worker {w} stopped ({msg[0]}, exit code "
                                       f"{self.procs[w].exitcode}) while waiting for "
                                       f"{kind!r}")
        finally:
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for t in pending:  # answered while another raised: its "closed" report kept
                if not t.cancelled() and t.exception() is None:
                    self._keep_closed(t.result())
        return [t.result() for t in gets]

    def _keep_closed(self, msg: tuple[Any, ...]) -> None:
        if msg[0] == "closed":
            self.closed.append(msg[1])

    async def run_stage(self, k: int, stage: Any, start_ns: int) -> int:
        """Run stage ``k`` in every worker from ``start_ns``; return requests sent."""
        self.source.restart()
        self.shared.new_stage()
        for c in self.conns:
            c.send(("stage", k, stage, start_ns))
        done = await self._all("done")
        self.outcomes = [m[3] for m in done]
        return sum(int(m[2]) for m in done)

    def unreachable(self) -> dict[str, Any]:
        """The endpoints the workers gave up, and why one stopped the run."""
        return merged_outcomes(self.outcomes)

    def view(self) -> FleetView:
        return FleetView(self.shared)

    async def close(self, interrupt: bool, why: str | None = None) -> None:
        """Ask every worker to finish (``interrupt``: cancel what is in flight, as Ctrl-C
        does, the cancelled rows saying ``why``, or else why a worker stopped on its disk)
        and wait until each wrote its files; a worker that hangs is killed."""
        if interrupt:
            self.shared.interrupt(why or failure_reason(self.closed))
        for c in self.conns:
            with contextlib.suppress(OSError, ValueError):
                c.send(("close",))
        for w in range(self.n):
            if any(c.get("worker") == w for c in self.closed):
                continue
            while True:
                msg = await self._get(w, 60)
                if msg[0] == "closed":
                    self.closed.append(msg[1])
                if msg[0] in ("closed", "eof", "timeout"):
                    break
        loop = asyncio.get_running_loop()
        for p, c in zip(self.procs, self.conns, strict=True):
            with contextlib.suppress(Exception):
                loop.remove_reader(c.fileno())
            for _ in range(500):  # up to 5 s to exit after its files are written
                if not p.is_alive():
                    break
                await asyncio.sleep(0.01)
            if p.is_alive():
                p.kill()
                p.join(5)
            c.close()

    def merge(self, run_dir: Path) -> int:
        """Worker files merged into the run folder's (parent rows first); return requests."""
        return merge_parts(run_dir, [Path(s.out_dir) for s in self.specs])


class _WriterView:
    def __init__(self, shared: Counters) -> None:
        self._s = shared

    @property
    def n_requests(self) -> int:
        return self._s.total(0)

    @property
    def n_errors(self) -> int:
        return self._s.total(1)

    @property
    def recent_ttft_ms(self) -> list[float]:
        vals = [self._s.stats[w * _STATS + 5] / 1000 for w in range(self._s.n)]
        return [v for v in vals if v > 0]


class _TimersView:
    def __init__(self, shared: Counters) -> None:
        self._s = shared

    @property
    def inflight(self) -> int:
        return self._s.total(4)


class FleetView:
    """The counters ``Progress`` reads, summed over the workers."""

    def __init__(self, shared: Counters) -> None:
        self._s = shared
        self.writer = _WriterView(shared)
        self.timers = _TimersView(shared)

    @property
    def trees_done(self) -> int:
        return self._s.total(2)

    @property
    def sessions_done(self) -> int:
        return self._s.total(3)
