"""One timer heap for every waiting turn of a run, with the idle-gap cap.

Waiters sleep until an absolute target (ns from the run start). When nothing is in flight
and the earliest pending think timer is more than ``idle_cap_ns`` away, every pending
think timer is pulled in by the same amount (their spacing kept), so a replay does not
sit idle through long recorded tool gaps. Arrival timers (open loop) are never pulled in:
they define the load. A waiter gets back its effective target, which becomes the
request's ``scheduled_ns``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable

from agentbench.replay.clock import VirtualEventLoop


class Timers:
    def __init__(self, t0_ns: int, idle_cap_ns: int | None,
                 now_ns: Callable[[], int] | None = None) -> None:
        self.t0_ns = t0_ns
        if now_ns is not None:  # the run's clock (virtual time: the loop's own)
            self.now_ns = now_ns  # type: ignore[method-assign]
        self.idle_cap_ns = idle_cap_ns
        self.inflight = 0
        self._starting = 0  # fired waiters that have not resumed yet
        self._heap: list[list[object]] = []  # [target_ns, seq, future, pullable]
        self._seq = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for: int | None = None
        self.pulled_in_ns = 0  # total shift applied (reported in run.json)
        #: with worker processes: whether another worker has requests in flight (then
        #: nothing is pulled in here either)
        self.busy_elsewhere: Callable[[], bool] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the waits run on, looked up once: ``asyncio.get_running_loop`` asks the
        OS for the process id on every call (to notice a fork)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self.t0_ns

    async def wait_until(self, target_ns: int, pullable: bool = True) -> int:
        """Sleep until ``target_ns``; return the effective target (after any pull-in)."""
        fut: asyncio.Future[int] = self._running_loop().create_future()
        entry: list[object] = [target_ns, next(self._seq), fut, pullable]
        heapq.heappush(self._heap, entry)
        if pullable:
            self._check_idle()
        self._arm()
        try:
            return await fut
        except asyncio.CancelledError:
            entry[2] = None
            raise
        finally:
            if fut.done() and not fut.cancelled():
                self._starting -= 1

    def waited_now(self) -> bool:
        """``await wait_until(now_ns(), pullable=False)`` without waiting, when that wait
        would run nothing else before it returns: the loop is virtual and nothing else is
        at this instant (``VirtualEventLoop.alone``), and no other waiter is due. The
        heap's timer is left as the wait leaves it (re-armed for the first waiter), so
        what follows is the same. False (nothing done) otherwise."""
        loop = self._running_loop()
        if not (isinstance(loop, VirtualEventLoop) and loop.alone()):
            return False
        first = self._first_target()
        if first is not None and first <= self.now_ns():
            return False
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._armed_for = None
        self._arm()
        return True

    def request_started(self) -> None:
        self.inflight += 1

    def request_ended(self) -> None:
        self.inflight -= 1
        if self.inflight == 0 and self.idle_cap_ns is not None:
            self._running_loop().call_soon(self._check_idle)

    def check_idle(self) -> None:
        """Pull pending think timers in when nothing is in flight (see the module doc)."""
        self._check_idle()

    def _check_idle(self) -> None:
        if self.idle_cap_ns is None or self.inflight or self._starting:
            return
        if self.busy_elsewhere is not None and self.busy_elsewhere():
            return
        live = [e for e in self._heap if e[2] is not None and e[3]]
        if not live:
            return
        earliest = min(int(e[0]) for e in live)  # type: ignore[call-overload]
        limit = self.now_ns() + self.idle_cap_ns
        if earliest <= limit:
            return
        shift = earliest - limit
        for e in live:
            e[0] = int(e[0]) - shift  # type: ignore[call-overload]
        heapq.heapify(self._heap)
        self.pulled_in_ns += shift
        self._arm()

    def _first_target(self) -> int | None:
        """The target of the earliest waiter still waiting (the cancelled ones on top of
        the heap dropped), or None."""
        heap = self._heap
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
        return int(heap[0][0]) if heap else None  # type: ignore[call-overload]

    def _arm(self) -> None:
        first = self._first_target()
        if first is None:
            return
        if self._armed_for is not None and self._armed_for <= first:
            return
        if self._handle is not None:
            self._handle.cancel()
        loop = self._running_loop()
        delay = (first - self.now_ns()) / 1e9
        self._armed_for = first
        self._handle = loop.call_at(loop.time() + max(0.0, delay), self._fire)

    def _fire(self) -> None:
        """Release one due waiter per loop iteration: between releases the loop polls its
        sockets, so a burst of due turns (lanes in lockstep) never holds back the arrival
        stamps of streams in flight."""
        self._handle = None
        self._armed_for = None
        now = self.now_ns()
        first = self._first_target()
        if first is not None and first <= now:
            target, _, fut, _ = heapq.heappop(self._heap)
            if not fut.done():  # type: ignore[attr-defined]
                self._starting += 1
                fut.set_result(target)  # type: ignore[attr-defined]
        first = self._first_target()
        if first is not None and first <= now:
            self._armed_for = first
            self._handle = self._running_loop().call_soon(self._fire)  # type: ignore[assignment]
        else:
            self._arm()

    def abort_all(self, exc: type[BaseException]) -> None:
        """End every pending wait by raising ``exc()`` in it (a stage ended)."""
        for e in self._heap:
            fut = e[2]
            if fut is not None and not fut.done():  # type: ignore[attr-defined]
                fut.set_exception(exc())  # type: ignore[attr-defined]
        self._heap.clear()
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._armed_for = None
