"""Why a worker's cancelled rows were cancelled (``--workers N``): the parent's reason
travels with its interrupt, a worker whose disk refused the results says so, and the
parent hears a worker that stopped at once, not after the workers before it."""

from __future__ import annotations

import asyncio
import multiprocessing
from types import SimpleNamespace
from typing import Any

import pytest

from agentbench.errors import ResultsWriteError
from agentbench.replay.fleet import Fleet
from agentbench.replay.shared import WHY_BYTES, Shared, failure_reason
from agentbench.replay.sigterm import stop_reason
from agentbench.replay.workers import _watch

DISK = "the results could not be written (File too large)"


def _shared(n: int = 2) -> Shared:
    return Shared(multiprocessing.get_context("spawn"), n)


def test_an_interrupt_carries_its_reason_through_shared_memory() -> None:
    s = _shared()
    assert not s.interrupted() and s.interrupt_reason() is None
    s.interrupt(DISK)
    assert s.interrupted() and s.interrupt_reason() == DISK
    plain = _shared()
    plain.interrupt()  # Ctrl-C in the parent: no reason, the generic stop
    assert plain.interrupted() and plain.interrupt_reason() is None
    long = _shared()
    long.interrupt("é" * WHY_BYTES)  # cut to the room it has, never an error
    cut = long.interrupt_reason()
    assert cut is not None and len(cut.encode()) < WHY_BYTES
    assert cut == "é" * len(cut)  # at a character's end


def _ctx(reason: str | None = None) -> Any:
    timers = SimpleNamespace(inflight=1, check_idle=lambda: None)
    writer = SimpleNamespace(n_requests=0, n_errors=0, recent_ttft_ms=[])
    return SimpleNamespace(cancel_reason=reason, timers=timers, writer=writer, trees_done=0,
                           sessions_done=0)


async def _watched(shared: Shared, ctx: Any) -> asyncio.Task[Any]:
    main = asyncio.ensure_future(asyncio.sleep(30))
    spec = SimpleNamespace(index=0, parent_pid=None)
    await asyncio.wait_for(_watch(spec, shared, ctx, main, asyncio.Event()), 5)  # type: ignore[arg-type]
    await asyncio.gather(main, return_exceptions=True)
    return main


async def test_a_worker_takes_the_reason_of_the_parents_interrupt() -> None:
    s = _shared()
    s.interrupt(DISK)
    ctx = _ctx()
    main = await _watched(s, ctx)
    assert main.cancelled() and ctx.cancel_reason == DISK
    # a reason the worker set first (its own disk) is kept
    ctx = _ctx("the results could not be written (No space left on device)")
    await _watched(s, ctx)
    assert ctx.cancel_reason == "the results could not be written (No space left on device)"
    # no reason given: none set here, so the stage says the generic stop
    s = _shared()
    s.interrupt()
    ctx = _ctx()
    main = await _watched(s, ctx)
    assert main.cancelled() and ctx.cancel_reason is None


def test_a_workers_write_error_is_the_reason_the_others_stop() -> None:
    assert failure_reason([{"worker": 0, "write_error": None}]) is None
    closed = [{"worker": 1, "write_error": "File too large"}]
    assert failure_reason(closed) == DISK
    # the same words as a single process's stop on its own disk
    assert failure_reason(closed) == stop_reason(ResultsWriteError("x", "File too large", 3))


class _Proc:
    exitcode = None
    alive = True

    def is_alive(self) -> bool:
        return self.alive


class _Conn:
    def fileno(self) -> int:
        return -1

    def send(self, msg: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _fleet(n: int) -> Fleet:
    fleet = Fleet.__new__(Fleet)
    fleet.n = n
    fleet.procs = [_Proc() for _ in range(n)]
    fleet.inboxes = [asyncio.Queue() for _ in range(n)]
    fleet.closed = []
    fleet.conns = [_Conn() for _ in range(n)]
    fleet.shared = _shared(n)
    return fleet


async def test_the_parent_hears_a_stopped_worker_before_the_ones_still_running() -> None:
    # worker 1's disk refused its results while worker 0 still runs its stage: the stage
    # ends at once (it waited for worker 0's stage end, or for its disk to fail too)
    fleet = _fleet(3)
    fleet.inboxes[2].put_nowait(("done", 0, 5, {}))
    fleet.inboxes[1].put_nowait(("closed", {"worker": 1, "write_error": "File too large"}))
    with pytest.raises(RuntimeError, match="replay worker 1 stopped"):
        await asyncio.wait_for(fleet._all("done"), 5)
    assert [c["worker"] for c in fleet.closed] == [1]
    # the interrupt that follows tells the other workers why
    for p in fleet.procs:
        p.alive = False  # they wrote their files and exited
    await fleet.close(interrupt=True)
    assert fleet.shared.interrupt_reason() == DISK


async def test_a_parents_own_reason_comes_first() -> None:
    fleet = _fleet(1)
    fleet.closed = [{"worker": 0, "write_error": "File too large"}]
    fleet.procs[0].alive = False
    await fleet.close(interrupt=True, why="the run was stopped by SIGTERM")
    assert fleet.shared.interrupt_reason() == "the run was stopped by SIGTERM"


async def test_every_worker_answering_returns_their_messages_in_order() -> None:
    fleet = _fleet(3)
    for w in (2, 0, 1):
        fleet.inboxes[w].put_nowait(("done", 0, w, {}))
    got = await asyncio.wait_for(fleet._all("done"), 5)
    assert [m[2] for m in got] == [0, 1, 2] and fleet.closed == []


def test_ray_workers_read_the_drivers_reason_from_the_coordinator() -> None:
    """Over Ray the flags travel with each publish's answer (no Ray needed to check the
    coordinator's and the worker's sides: plain objects here)."""
    from agentbench.replay.raynode import Coordinator, RemoteShared

    coord = Coordinator(n_trees=3, recycle=False, n_workers=2)
    worker = RemoteShared(coord)
    worker.flags = coord.publish(0, [0] * 6)
    assert not worker.interrupted() and worker.interrupt_reason() is None
    coord.raise_interrupt("the run was stopped by SIGTERM")
    worker.flags = coord.publish(0, [0] * 6)
    assert worker.interrupted()
    assert worker.interrupt_reason() == "the run was stopped by SIGTERM"
    coord.raise_interrupt()  # Ctrl-C: no reason, the generic stop
    worker.flags = coord.publish(1, [0] * 6)
    assert worker.interrupted() and worker.interrupt_reason() is None
