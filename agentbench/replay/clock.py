"""The run's clock: the wall clock (``time.perf_counter_ns`` from the run start) for real
endpoints, or a virtual clock for the embedded simulator.

The virtual clock is an asyncio event loop whose ``time()`` is simulated: when every task is
waiting and no callback is ready, the loop jumps straight to the next timer instead of
sleeping. The replay's own code (lanes, trees, timers, deadlines, ``asyncio.sleep``,
``wait_for``) runs unchanged on it; nothing measured reads the host's clock, so the same
scenario and seed give the same records whatever the host's load.

Time is kept in integer nanoseconds; ``time()`` is that over 1e9 (exact to well under a
nanosecond for runs shorter than ~10 simulated days).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import selectors
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

WALL = "wall"
VIRTUAL = "virtual"

#: how long the virtual loop waits on real I/O (a signal, a thread) when nothing at all is
#: scheduled before it calls the run stuck
STALL_S = 60.0
#: while callbacks are ready, real I/O (the self-pipe: signal and thread wake-ups, whose
#: callbacks are queued already) is polled every this many loop turns; always before the
#: clock advances
POLL_EVERY = 64


class VirtualClockStalled(RuntimeError):
    """Every task waits on something that no timer or I/O will ever bring."""


class _JumpSelector(selectors.BaseSelector):
    """Polls real I/O without blocking (the loop's self-pipe: signals, thread wake-ups) and,
    when nothing is ready, advances the loop's virtual time by the timeout asyncio asked to
    sleep."""

    def __init__(self) -> None:
        self._inner = selectors.DefaultSelector()
        self.loop: VirtualEventLoop | None = None
        self._skipped = 0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.get_key(fileobj)

    def get_map(self) -> Any:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:  # callbacks are ready: look at real I/O only now and then
            self._skipped += 1
            if self._skipped < POLL_EVERY:
                return []
        self._skipped = 0
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # nothing scheduled: only real I/O can wake the loop
            ready = self._inner.select(STALL_S)
            if not ready:
                raise VirtualClockStalled(
                    "virtual clock: every task is waiting and nothing is scheduled")
            return ready
        assert self.loop is not None
        self.loop._advance(timeout)
        return []


class _FifoTimer(asyncio.TimerHandle):
    """A timer that, due at the same time as another, runs after the ones scheduled before
    it (asyncio's heap leaves such ties in whatever order its layout gives, so unrelated
    timers could reorder two events of one instant)."""

    __slots__ = ("_seq",)
    _seq: int

    def __lt__(self, other: asyncio.TimerHandle) -> bool:
        w, o = self._when, other._when  # type: ignore[attr-defined]
        return w < o or (w == o and self._seq < other._seq)  # type: ignore[attr-defined]


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An event loop on simulated time (see the module doc). Callbacks due at one instant
    run in the order they were scheduled, so a run's events keep their order whatever
    other timers exist."""

    def __init__(self) -> None:
        sel = _JumpSelector()
        super().__init__(sel)
        sel.loop = self
        self._vnow_ns = 0
        self._timer_seq = itertools.count()

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()  # type: ignore[attr-defined]
        timer = _FifoTimer(when, callback, args, self, context)
        timer._seq = next(self._timer_seq)
        if timer._source_traceback:  # type: ignore[attr-defined]
            del timer._source_traceback[-1]  # type: ignore[attr-defined]
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def time(self) -> float:
        return self._vnow_ns / 1e9

    def now_ns(self) -> int:
        """Simulated nanoseconds since the loop was made."""
        return self._vnow_ns

    def _advance(self, timeout: float) -> None:
        sched: list[Any] = getattr(self, "_scheduled", [])
        when = sched[0].when() if sched else self.time() + timeout
        self._vnow_ns = max(self._vnow_ns, round(when * 1e9))


def run_on(clock: str, main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh loop of the given clock (Ctrl-C cancels it):
    the virtual loop, or for the wall clock uvloop's when it is installed
    (:mod:`agentbench.transport.loop`), else asyncio's."""
    from agentbench.transport.loop import loop_factory

    factory: Callable[[], asyncio.AbstractEventLoop] | None = (
        VirtualEventLoop if clock == VIRTUAL else loop_factory())
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def now_ns_of(clock: str, t0_ns: int) -> Callable[[], int]:
    """The run's ``now_ns``: simulated ns on the virtual loop, else perf_counter ns since
    ``t0_ns``."""
    if clock == VIRTUAL:
        loop = asyncio.get_running_loop()
        if not isinstance(loop, VirtualEventLoop):
            raise RuntimeError("a virtual-clock run needs the VirtualEventLoop (run_on)")
        return loop.now_ns
    perf = time.perf_counter_ns
    return lambda: perf() - t0_ns
