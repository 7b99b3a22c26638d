"""SIGTERM during a run: the run ends as on Ctrl-C, its files written
(``agentbench.replay.runner``); and what the requests a stop cancels say of it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class Sigterm:
    """SIGTERM ends the run as Ctrl-C does: the run task is cancelled, and every finished row
    and run.json are written. While they are (``hold``), a further SIGTERM or Ctrl-C only is
    noted (``came``, ``int_came``): ``timeout`` and process managers signal the process and
    then its group, so a second one comes at once, and a person presses Ctrl-C twice; the
    default action (asyncio's, for a second Ctrl-C) would stop the process half-way through
    its files (run.json left ``running``, the tables in pieces). One noted during a
    completed run's files stops the process after them, before any later variant.

    The handler is Python's own (as ``asyncio.Runner``'s for Ctrl-C): it hands the cancel to
    the loop's ready queue, which the virtual loop reads every turn, where a handler of the
    loop's waits for its poll of real I/O (every 64 turns): a SIGTERM in a run's last
    turns was lost with the handler when the run ended."""

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any],
                 before: Callable[[], None] | None = None) -> None:
        import signal

        self.loop = loop
        self.task = task
        #: called before the cancel (the run notes why it stops)
        self.before = before
        self.came = False
        self.holding = False
        self.old = signal.signal(signal.SIGTERM, self._signal)
        #: a Ctrl-C while the files are written (``hold``): asyncio.Runner's own handler
        #: raises KeyboardInterrupt at the second one, wherever the files are
        self.int_came = False
        self.old_int: Any = None

    def _signal(self, signum: int, frame: Any) -> None:
        self.came = True
        self.loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:  # a loop callback: the task waits at an await
        if not self.holding and not self.task.done():
            if self.before is not None:
                self.before()
            self.task.cancel()

    def hold(self) -> None:
        import signal

        self.holding = True
        self.old_int = signal.signal(signal.SIGINT, self._note_int)

    def _note_int(self, signum: int, frame: Any) -> None:
        self.int_came = True

    def undo(self) -> None:
        import signal

        signal.signal(signal.SIGTERM, self.old)
        if self.old_int is not None:
            signal.signal(signal.SIGINT, self.old_int)


def cancel_on_sigterm(before: Callable[[], None] | None = None) -> Sigterm | None:
    """SIGTERM cancels the running task (``Sigterm``), calling ``before`` first; None where
    signals cannot be handled here (not the main thread, another platform)."""
    import signal

    task = asyncio.current_task()
    if task is None or not hasattr(signal, "SIGTERM"):
        return None
    try:
        return Sigterm(asyncio.get_running_loop(), task, before)
    except (ValueError, OSError):  # not the main thread
        return None


#: the message of requests cancelled by a stop that is not the stage's deadline and
#: names no other reason (``RunContext.cancel_reason``)
STOPPED = "the run was stopped before its bound (Ctrl-C, or an error)"


def stop_reason(e: BaseException) -> str:
    """Why the requests a stage cancels on ``e`` were cancelled (their rows' message)."""
    from agentbench.errors import ResultsWriteError

    if isinstance(e, ResultsWriteError):  # raised by a write, not told by the writer
        return f"the results could not be written ({e.reason})"
    if isinstance(e, asyncio.CancelledError | KeyboardInterrupt):
        return STOPPED
    return f"the run stopped on an error ({type(e).__name__})"
