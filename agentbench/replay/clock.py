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
from asyncio import format_helpers
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

WALL = "wall"
VIRTUAL = "virtual"

#: how long the virtual loop waits on real I/O (a signal, a thread) when nothing at all is
#: scheduled before it calls the run stuck
STALL_S = 60.0
#: real I/O (the self-pipe: signal and thread wake-ups, whose callbacks are queued
#: already) is polled every this many loop turns, and whenever nothing at all is scheduled.
#: A virtual-time run has no other I/O (the simulator is in process, no thread feeds the
#: loop), and a poll at every clock advance was 3-4% of a small what-if's CPU
POLL_EVERY = 64
#: asyncio's rule for dropping cancelled timers from the heap at once: more than this many
#: timers, more than this fraction of them cancelled
_MIN_SCHEDULED = 100
_MAX_CANCELLED_FRACTION = 0.5


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
        if timeout is not None:  # look at real I/O only every POLL_EVERY turns
            self._skipped += 1
            if self._skipped < POLL_EVERY:
                if timeout:  # nothing ready: the clock jumps to the next timer
                    assert self.loop is not None
                    self.loop._advance(timeout)
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


class _Handle(asyncio.Handle):
    """asyncio's ``Handle`` made without its debug checks (the virtual loop makes these
    only outside debug mode): a task's every wake-up is one."""

    __slots__ = ()

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop,
                 context: contextvars.Context | None) -> None:
        self._context = contextvars.copy_context() if context is None else context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None


class _TimerHandle(asyncio.TimerHandle):
    """asyncio's ``TimerHandle`` made without its debug checks (see ``_Handle``). Its
    fields are set here, not through ``_Handle.__init__``: that call made a timer wait and
    its wake-up 1.7 -> 1.9 us (2026-12-06), most of what these handles save."""

    __slots__ = ()

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop,
                 context: contextvars.Context | None) -> None:
        self._context = contextvars.copy_context() if context is None else context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None
        self._when = when
        self._scheduled = False


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An event loop on simulated time (see the module doc). Callbacks due at one instant
    run in the order they were scheduled, so a run's events keep their order whatever
    other timers exist.

    Its turn (``_run_once``) is asyncio's, step for step (cancelled timers dropped, real
    I/O polled, the timers due moved to the ready queue, the callbacks ready at the turn's
    start run), on a heap of ``(when, sequence, handle)`` entries: ties in ``when`` go by
    the order of scheduling, compared in C rather than by a timer's ``__lt__``. A timer is
    due at its own nanosecond (the clock's unit), not up to the clock's resolution early as
    in asyncio, so two timers less than 1 ns apart in different nanoseconds run each at its
    own time."""

    def __init__(self) -> None:
        sel = _JumpSelector()
        super().__init__(sel)
        sel.loop = self
        self._vnow_ns = 0
        self._timer_seq = itertools.count()
        #: (when, sequence, handle, when in ns): the ns rounded once, when scheduled
        self._vheap: list[tuple[float, int, asyncio.TimerHandle, int]] = []

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")  # asyncio's ``_check_closed``
        if self._debug:  # type: ignore[attr-defined]
            timer = asyncio.TimerHandle(when, callback, args, self, context)
            if timer._source_traceback:  # type: ignore[attr-defined]
                del timer._source_traceback[-1]  # type: ignore[attr-defined]
        else:
            timer = _TimerHandle(when, callback, args, self, context)
        heapq.heappush(self._vheap, (when, next(self._timer_seq), timer, round(when * 1e9)))
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    def call_soon(self, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        """asyncio's ``call_soon``; outside debug mode with a lighter handle (``_Handle``)."""
        if self._debug:  # type: ignore[attr-defined]
            return super().call_soon(callback, *args, context=context)
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        self._ready.append(handle)  # type: ignore[attr-defined]
        return handle

    def _run_once(self) -> None:
        """asyncio's turns, one after another until the loop is told to stop (what
        ``run_forever`` does between calls of ``_run_once``, without a call a turn), each
        callback run as ``Handle._run`` runs it (``_report``'s rules, inline). In debug mode,
        one turn a call, its callbacks run with the current handle kept
        (``_run_ready_debug``)."""
        debug = self._debug  # type: ignore[attr-defined]
        pop = heapq.heappop
        ready: Any = self._ready  # type: ignore[attr-defined]
        popleft = ready.popleft
        sel = self._selector  # type: ignore[attr-defined]
        while True:
            heap = self._vheap
            n = len(heap)
            if n > _MIN_SCHEDULED and \
                    self._timer_cancelled_count / n > _MAX_CANCELLED_FRACTION:
                heap = self._drop_cancelled()
            else:
                while heap and heap[0][2]._cancelled:
                    self._timer_cancelled_count -= 1
                    pop(heap)[2]._scheduled = False  # type: ignore[attr-defined]
            if ready or self._stopping:  # type: ignore[attr-defined]
                timeout: float | None = 0
            elif heap:
                timeout = max(0, heap[0][0] - self._vnow_ns / 1e9)  # ``time()``, inline
            else:
                timeout = None
            if timeout is not None and sel._skipped < POLL_EVERY - 1:
                # ``_JumpSelector.select``'s turn without a poll, inline (most turns)
                sel._skipped += 1
                if timeout:  # ``_advance``
                    self._vnow_ns = max(self._vnow_ns, heap[0][3])
            else:
                events = sel.select(timeout)
                if events:
                    self._process_events(events)  # type: ignore[attr-defined]
            # the timers due: those of this nanosecond (the clock's unit), so that a
            # callback never runs before its own time (two timers less than 1 ns apart in
            # different nanoseconds run in two turns, each at its own)
            now_ns = self._vnow_ns
            while heap and heap[0][3] <= now_ns:
                handle = pop(heap)[2]
                handle._scheduled = False  # type: ignore[attr-defined]
                ready.append(handle)
            if debug:
                self._run_ready_debug(len(ready))
                return
            for _ in range(len(ready)):
                handle = popleft()
                if handle._cancelled:
                    continue
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    _report(self, handle, exc)
            if self._stopping:  # type: ignore[attr-defined]
                return

    def alone(self) -> bool:
        """Whether the running callback is all there is at this instant: nothing else is
        ready (in this turn or the next) and no timer is due at this nanosecond. Turns of
        the loop from here would run only what the caller schedules."""
        heap = self._vheap
        return not self._ready and not (  # type: ignore[attr-defined]
            heap and heap[0][3] <= self._vnow_ns)

    def _drop_cancelled(self) -> list[tuple[float, int, asyncio.TimerHandle, int]]:
        """asyncio's rule: the cancelled timers leave the heap at once when they are over
        half of more than ``_MIN_SCHEDULED``."""
        kept = []
        for entry in self._vheap:
            if entry[2]._cancelled:
                entry[2]._scheduled = False  # type: ignore[attr-defined]
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._vheap = kept
        self._timer_cancelled_count = 0
        return kept

    def _run_ready_debug(self, ntodo: int) -> None:
        """The ready callbacks in asyncio's debug mode (the current handle kept)."""
        for _ in range(ntodo):
            handle = self._ready.popleft()  # type: ignore[attr-defined]
            if handle._cancelled:
                continue
            self._current_handle = handle
            try:
                handle._run()
            finally:
                self._current_handle = None

    def close(self) -> None:
        super().close()
        self._vheap.clear()

    def time(self) -> float:
        return self._vnow_ns / 1e9

    def now_ns(self) -> int:
        """Simulated nanoseconds since the loop was made."""
        return self._vnow_ns

    def _advance(self, timeout: float) -> None:
        heap = self._vheap
        self._vnow_ns = max(self._vnow_ns, heap[0][3] if heap
                            else round((self.time() + timeout) * 1e9))


def _report(loop: asyncio.AbstractEventLoop, handle: asyncio.Handle,
            exc: BaseException) -> None:
    """What ``asyncio.Handle._run`` does with a callback's exception: the loop's exception
    handler, with the callback named as asyncio names it."""
    cb = format_helpers._format_callback_source(
        handle._callback, handle._args)  # type: ignore[attr-defined]
    context: dict[str, Any] = {"message": f"Exception in callback {cb}", "exception": exc,
                               "handle": handle}
    if handle._source_traceback:  # type: ignore[attr-defined]
        context["source_traceback"] = handle._source_traceback  # type: ignore[attr-defined]
    loop.call_exception_handler(context)


class Pause:
    """A background loop's pause: ``await pause.until_stop(s)`` returns after ``s`` seconds
    of the run's clock, or as soon as ``stop`` is set. One waiter on the event serves
    every pause, and a timer wakes it: two callbacks a pause, where
    ``wait_for(stop.wait(), s)`` makes a task and cancels it through an exception each time
    (a server-metrics sample every 10 simulated seconds made a third of a virtual run's
    callbacks that way). A pause is ``asyncio.wait((stopped,), timeout=s)``'s steps
    without its sets and coroutines: the timer set at ``loop.time() + s``, the waiter
    released by whichever comes first, the pause resumed a turn later, the timer cancelled
    and the callback removed after."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stopped = asyncio.ensure_future(stop.wait())

    async def until_stop(self, seconds: float) -> None:
        stopped = self._stopped
        if stopped.done():
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        timer = loop.call_at(loop.time() + seconds, _release, waiter)

        def on_stop(_: object) -> None:
            timer.cancel()
            _release(waiter)

        stopped.add_done_callback(on_stop)
        try:
            await waiter
        finally:
            timer.cancel()
            stopped.remove_done_callback(on_stop)

    def close(self) -> None:
        self._stopped.cancel()


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


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
