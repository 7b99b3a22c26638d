"""When a closed-loop stage's profiling phase starts: once every lane is warm.

A lane warms up with its first ``warmup.requests_per_lane`` requests (phase ``warmup``,
left out of every figure). The lane is warm once it has sent them all and each has ended,
or once the lane has ended. A warm lane goes on sending, and its requests stay warmup
until the profiling phase starts, so the measured window has every lane past warmup.

``limits.duration_s`` counts from the moment the last lane of the stage is warm, as
AIPerf's AgentX warmup runs outside its profiling duration. At most ``warmup.max_s``
(default: ``duration_s``) after the stage start the profiling phase starts anyway, and
every request from then on is measured.

The count of warm lanes and the profiling start live in the tree source's state
(:class:`agentbench.replay.stages.TreeSource`), shared memory when lanes are sharded over
worker processes, so every worker's deadline counts from one instant.
"""

from __future__ import annotations

from collections.abc import Callable


class LaneWarmup:
    """One lane's warmup: requests still to send as warmup and those in flight."""

    __slots__ = ("left", "in_flight", "done", "budgeted", "_on_warm", "_profiling", "_gated")

    def __init__(self, requests: int, on_warm: Callable[[], None],
                 profiling: Callable[[], bool] = lambda: False, gated: bool = True) -> None:
        self.left = requests
        self.in_flight = 0
        self.done = False
        #: more than one warmup request: every request of the lane's trees draws from the
        #: budget; one request: only the warm start's own turn is warmup
        self.budgeted = requests > 1
        self._on_warm = on_warm
        #: whether the profiling phase started (every lane warm, or ``warmup.max_s`` ran
        #: out): from then on every request is measured, warm or not
        self._profiling = profiling
        #: False: the stage has no profiling phase to wait for (no duration_s or max_s
        #: bounds the wait), and the lane measures once it is warm itself
        self._gated = gated

    def take(self) -> bool:
        """Count one warmup request sent; False when the lane has none left or the
        profiling phase started."""
        if self.left <= 0:
            return False
        if self._gated and self._profiling():
            self.left = 0
            self._check()
            return False
        self.left -= 1
        self.in_flight += 1
        return True

    def profiling(self) -> bool:
        """Whether the lane's requests are measured once it is warm: the stage's profiling
        phase started (every lane warm, or max_s), or there is none to wait for."""
        return not self._gated or self._profiling()

    def ended(self) -> None:
        """A warmup request ended (whatever its outcome)."""
        if self.in_flight > 0:
            self.in_flight -= 1
        self._check()

    def close(self) -> None:
        """The lane ended (its trees ran out, or the stage stopped)."""
        self.left = 0
        self._check()

    def _check(self) -> None:
        if not self.done and self.left <= 0 and self.in_flight <= 0:
            self.done = True
            self._on_warm()
