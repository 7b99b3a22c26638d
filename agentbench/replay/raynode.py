"""The side of lanes on Ray that runs on the nodes (:mod:`agentbench.replay.raylanes` is
the driver's): the coordinator actor every worker shares, a worker's remote views of it
(tree sequence, budget leases, flags), and the load worker actor itself."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import socket
import threading
import time
from pathlib import Path
from typing import Any

from agentbench.replay.shared import _STATS, Counters
from agentbench.replay.stages import TreeSource
from agentbench.replay.workers import WorkerSpec, run_worker

#: the most requests of a stage's budget one lease hands a worker
LEASE_MAX = 64


class Coordinator(Counters):
    """What every worker shares (a Ray actor on the driver's node): the tree sequence's
    state (a :class:`TreeSource` over tree numbers), the stage's request budget, the flags
    (stop, interrupt) and each worker's progress counters."""

    def __init__(self, n_trees: int, recycle: bool, n_workers: int) -> None:
        super().__init__([0] * (n_workers * _STATS), n_workers)
        self.source = TreeSource(list(range(n_trees)), recycle)  # type: ignore[arg-type]
        self.sent = 0
        self.stop = False
        #: False; True, or why the driver interrupted when it said
        self.interrupt: bool | str = False

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def tree(self, op: str, *args: Any) -> Any:
        return getattr(self.source, op)(*args)

    def lease(self, limit: int) -> tuple[int, bool]:
        """Requests of the stage's ``limit`` for one worker to send: a share of what is
        left (half of it spread over the workers, at most ``LEASE_MAX``, at least one), and
        whether that emptied the budget; (0, True) once it is spent."""
        left = limit - self.sent
        if left <= 0:
            return 0, True
        n = max(1, min(LEASE_MAX, left // (2 * self.n)))
        self.sent += n
        return n, self.sent >= limit

    def stop_all(self) -> None:
        self.stop = True

    def new_stage(self) -> None:
        self.source.restart()
        self.sent = 0
        self.stop = False

    def raise_interrupt(self, why: str | None = None) -> None:
        self.interrupt = why or True

    def publish(self, w: int, values: list[int]) -> tuple[bool, Any, bool]:  # type: ignore[override]
        """Worker ``w``'s counters in; (stop, interrupt: False, True or why, another worker
        has requests in flight) out."""
        super().publish(w, values)
        return self.stop, self.interrupt, self.busy_elsewhere(w)

    def snapshot(self) -> list[int]:
        return list(self.stats)


class RemoteTreeSource(TreeSource):
    """The worker's view of the coordinator's tree sequence: the same methods, each one
    round trip (``lane_warm`` is sent without waiting; Ray keeps one caller's calls to an
    actor in order)."""

    def __init__(self, specs: list[Any], recycle: bool, coord: Any) -> None:
        super().__init__(specs, recycle)
        self.coord = coord
        self.local = False  # other actors' lanes warm up too: ``_warm`` looks now and then

    def _call(self, op: str, *args: Any) -> Any:
        import ray

        return ray.get(self.coord.tree.remote(op, *args))

    def restart(self) -> None:
        self._call("restart")

    def lane_warm(self, lanes: int, now_ns: int) -> None:
        self.coord.tree.remote("lane_warm", lanes, now_ns)

    def start_profiling(self, now_ns: int) -> int:
        return int(self._call("start_profiling", now_ns))

    def profile_start_ns(self) -> int | None:
        out = self._call("profile_start_ns")
        return None if out is None else int(out)

    def next(self, limit: int | None = None) -> Any:
        return self._spec(self._call("next", limit))

    def at(self, pos: int) -> Any:
        return self._spec(self._call("at", pos))

    def _spec(self, item: Any) -> Any:
        return None if item is None else (self.specs[item[0]], item[1], item[2])


class RemoteShared:
    """A worker's side of :class:`Coordinator`, with the interface of
    :class:`agentbench.replay.shared.Shared`. Counters go out and flags come back in one
    call per publish, every 100 ms, never waited for: a worker reads the flags of its last
    answered publish (at most ~200 ms old). A Ray call costs the actor it reaches about
    1 ms of CPU (measured: 100 calls/s took 10% of a core), so publishing every 10 ms as
    worker processes do would take a tenth of a worker's CPU."""

    publish_ticks = 10

    def __init__(self, coord: Any) -> None:
        self.coord = coord
        self.flags = (False, False, False)  # stop, interrupt, busy elsewhere
        self.pending: Any = None
        self.leased, self.last_lease = 0, False

    def stage_begins(self) -> None:
        """A new stage: no lease yet (what the last stage left is not this one's)."""
        self.leased, self.last_lease = 0, False

    def tree_source(self, specs: list[Any], recycle: bool) -> TreeSource:
        return RemoteTreeSource(specs, recycle, self.coord)

    def take(self, limit: int) -> int:
        """One request of the stage's budget (``Shared.take``'s answer: the count after it,
        ``limit`` for the last one, -1 once spent), from this worker's lease; a spent lease
        asks the coordinator for the next (one round trip per lease, not per request).
        Every leased request is sent, so the stage sends its budget exactly; a worker stops
        once its lease is spent and the budget has none left."""
        import ray

        if self.leased <= 0:
            if self.last_lease:
                return -1
            self.leased, self.last_lease = ray.get(self.coord.lease.remote(limit))
            if self.leased <= 0:
                return -1
        self.leased -= 1
        return limit if self.leased == 0 and self.last_lease else 0

    def stop_all(self) -> None:
        self.coord.stop_all.remote()

    def _answered(self) -> None:
        import ray

        if self.pending is not None and ray.wait([self.pending], timeout=0)[0]:
            with contextlib.suppress(Exception):
                self.flags = tuple(ray.get(self.pending))
            self.pending = None

    def busy_elsewhere(self, me: int) -> bool:
        return bool(self.flags[2])

    def interrupted(self) -> bool:
        return bool(self.flags[1])

    def interrupt_reason(self) -> str | None:
        """Why the driver interrupted (``Shared.interrupt_reason``)."""
        why = self.flags[1]
        return why if isinstance(why, str) and why else None

    def stopped(self) -> bool:
        return bool(self.flags[0])

    def budget_spent(self) -> bool:
        """Never: the coordinator's stop flag is only ``stop_all``'s (a spent budget ends
        each worker's leases instead)."""
        return False

    def publish(self, w: int, values: list[int]) -> None:
        self._answered()
        if self.pending is None:
            self.pending = self.coord.publish.remote(w, values)


class ActorLink:
    """A worker actor's messages: to the driver through a queue it polls, from the driver
    into the worker's event loop (which runs in another thread of the actor)."""

    def __init__(self) -> None:
        self.out: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.inbox: asyncio.Queue[tuple[Any, ...]] | None = None
        self.early: list[tuple[Any, ...]] = []

    def send(self, msg: tuple[Any, ...]) -> None:
        self.out.put(msg)

    def listen(self, loop: asyncio.AbstractEventLoop,
               inbox: asyncio.Queue[tuple[Any, ...]]) -> None:
        with self.lock:
            self.loop, self.inbox = loop, inbox
            for msg in self.early:
                loop.call_soon_threadsafe(inbox.put_nowait, msg)
            self.early = []

    def post(self, msg: tuple[Any, ...]) -> None:
        with self.lock:
            if self.loop is None or self.inbox is None:
                self.early.append(msg)
            else:
                with contextlib.suppress(RuntimeError):  # the worker's loop has closed
                    self.loop.call_soon_threadsafe(self.inbox.put_nowait, msg)


class LoadWorker:
    """One worker, a Ray actor (threaded: ``run`` holds one thread for the whole run while
    ``post``, ``poll`` and ``clock`` answer on others)."""

    def __init__(self) -> None:
        self.link = ActorLink()

    def where(self) -> dict[str, Any]:
        import ray

        return {"node": ray.get_runtime_context().get_node_id(),
                "hostname": socket.gethostname(), "pid": os.getpid()}

    def clock(self) -> int:
        return time.perf_counter_ns()

    def sees(self, path: str) -> bool:
        return Path(path).is_dir()

    def run(self, spec: WorkerSpec, coord: Any, env: dict[str, str] | None = None) -> str:
        """Worker ``spec``'s part of the run; ``env``: the variables its endpoints read, as
        the driver has them (this process is the worker's alone, ended with the run)."""
        from agentbench.replay.clock import WALL, run_on

        os.environ.update(env or {})
        run_on(WALL, run_worker(spec, self.link, RemoteShared(coord)))
        return "done"

    def post(self, msg: tuple[Any, ...]) -> None:
        self.link.post(msg)

    def poll(self, timeout: float) -> list[tuple[Any, ...]]:
        out = []
        with contextlib.suppress(queue.Empty):
            out.append(self.link.out.get(timeout=timeout))
            while True:
                out.append(self.link.out.get_nowait())
        return out
