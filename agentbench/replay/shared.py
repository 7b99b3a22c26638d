"""What the parent and its worker processes share (``--workers N``,
:mod:`agentbench.replay.workers`): each worker's progress counters, the one tree
sequence's state, the stage's request budget and the flags (stop, interrupt, and why the
parent interrupted), in shared memory."""

from __future__ import annotations

from typing import Any

from agentbench.replay.stages import STATE_SLOTS, TreeSource

_STATS = 6  # requests, errors, trees, sessions, in flight, recent TTFT p50 (us)
#: the shared stop flag's values: the budget was taken in full (requests waiting to
#: reconnect go on), or the stage stops for everything (every endpoint unreachable)
_BUDGET_SPENT, _STOP_ALL = 1, 2
#: room for the reason an interrupt gives (``Shared.interrupt``), in bytes
WHY_BYTES = 512


class Counters:
    """Each of ``n`` workers' progress counters, ``_STATS`` per worker in ``stats`` (shared
    memory between processes, or a list in the Ray coordinator and the driver's copy)."""

    def __init__(self, stats: Any, n: int) -> None:
        self.stats, self.n = stats, n

    def total(self, i: int) -> int:
        return sum(self.stats[w * _STATS + i] for w in range(self.n))

    def busy_elsewhere(self, me: int) -> bool:
        """Another worker has requests in flight (as last published)."""
        return any(self.stats[w * _STATS + 4] for w in range(self.n) if w != me)

    def publish(self, w: int, values: list[int]) -> None:
        """Worker ``w``'s progress counters (``_STATS`` of them; a TTFT of 0: unchanged)."""
        i = w * _STATS
        for j, v in enumerate(values):
            if j < _STATS - 1 or v:
                self.stats[i + j] = v


class Shared(Counters):
    """What the parent and its workers share: the tree sequence, the stage's request
    budget and flags (sent, stop, interrupt), and per-worker progress counters."""

    #: a worker publishes its counters every this many 10 ms ticks (shared memory: each)
    publish_ticks = 1

    def __init__(self, mp: Any, n: int) -> None:
        super().__init__(mp.RawArray("q", n * _STATS), n)
        self.lock = mp.Lock()
        self.src = mp.RawArray("q", STATE_SLOTS)  # TreeSource state
        self.flags = mp.RawArray("q", 3)  # requests sent this stage, stop, interrupt
        #: why the parent interrupted (UTF-8; empty: no reason given, the generic stop)
        self.why = mp.RawArray("c", WHY_BYTES)

    def take(self, limit: int) -> int:
        """One request of the stage's budget: the count after it, or -1 if spent; the last
        one raises the stop flag for every worker."""
        with self.lock:
            n = self.flags[0]
            if n >= limit:
                return -1
            self.flags[0] = n = n + 1
            if n >= limit and not self.flags[1]:
                self.flags[1] = _BUDGET_SPENT
            return int(n)

    def stop_all(self) -> None:
        """Raise the stop flag: every worker ends the stage (every endpoint unreachable)."""
        with self.lock:
            self.flags[1] = _STOP_ALL

    def tree_source(self, specs: list[Any], recycle: bool) -> TreeSource:
        """The one tree sequence, drawn from by every worker."""
        return TreeSource(specs, recycle, self.src, self.lock)

    def new_stage(self) -> None:
        """The budget unspent and the stop flag down, before a stage starts."""
        with self.lock:
            self.flags[0] = 0
            self.flags[1] = 0

    def interrupt(self, why: str | None = None) -> None:
        """Every worker cancels what is in flight; ``why`` is its cancelled rows' message
        (``RunContext.cancel_reason``; None: the generic stop). Written before the flag
        goes up, so a worker that sees the flag reads the reason too."""
        if why:
            # cut to the room, at a character's end
            self.why.value = why.encode()[:WHY_BYTES - 1].decode(errors="ignore").encode()
        self.flags[2] = 1

    def interrupt_reason(self) -> str | None:
        return self.why.value.decode(errors="replace") or None

    def stage_begins(self) -> None:
        """A worker starts a stage (nothing to do: the parent reset the flags)."""

    def interrupted(self) -> bool:
        return bool(self.flags[2])

    def stopped(self) -> bool:
        return bool(self.flags[1])

    def budget_spent(self) -> bool:
        """Whether the stop flag is up only because the budget was taken in full."""
        return self.flags[1] == _BUDGET_SPENT


def failure_reason(closed: list[dict[str, Any]]) -> str | None:
    """Why the other workers stop when a worker stopped on its disk (its ``closed``
    message's ``write_error``): their cancelled rows say so, not the generic stop."""
    for c in closed:
        if c.get("write_error"):
            return f"the results could not be written ({c['write_error']})"
    return None
