"""Endpoints at run time, as the replay sees them: each one's transport
(``agentbench.transport``: how a request reaches its engine) and the replay's own state
for it (requests in flight, retry policy, connection backoff), plus client-side routing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentbench.prompts.layout import BlockCache
from agentbench.replay.schedule import choice_rng
from agentbench.transport.base import Transport
from agentbench.transport.opener import open_transport, reopen_transport


@dataclass
class LiveEndpoint:
    """One endpoint while the run goes."""

    transport: Transport
    inflight: int = 0
    retry: Any = None  # the endpoint's retry policy (``agentbench.replay.retry``), or None
    connect_failures: int = 0  # connection errors in a row (connection backoff)
    blocked_until_ns: int = 0  # no request is sent before this (run clock)
    reconnect_ns: int = 0  # how long a refused connection keeps trying (no budget spent)
    #: circuit breaker (``agentbench.replay.retry``): the first connection error since the
    #: last answer, and when the endpoint was given up (None: it was not)
    down_since_ns: int | None = None
    dead_ns: int | None = None
    #: reclassifies a row before it is written (context overflow, ``replay.overflow``)
    amend: Any = None

    @property
    def dead(self) -> bool:
        """Given up as unreachable: no request is routed to it any more."""
        return self.dead_ns is not None

    @property
    def label(self) -> str:
        return self.transport.label

    @property
    def api(self) -> str:
        return self.transport.api


def _live(cfg: Any, transport: Transport) -> LiveEndpoint:
    policy = getattr(cfg, "retry", None)
    return LiveEndpoint(
        transport, retry=policy if policy is not None and policy.max_attempts > 1 else None,
        reconnect_ns=int(getattr(cfg, "reconnect_s", 0.0) * 1_000_000_000))


async def open_endpoint(cfg: Any, index: int, caches: Mapping[str, BlockCache],
                        now_ns: Callable[[], int] | None = None) -> LiveEndpoint:
    """Open endpoint ``index`` of the scenario (``agentbench.transport.opener``); with
    ``now_ns`` (a virtual-clock run) a simulated endpoint runs on that clock."""
    return _live(cfg, await open_transport(cfg, index, caches, now_ns))


def opened(ep: LiveEndpoint) -> dict[str, Any]:
    """What opening found out, for ``reconnect`` in another process."""
    return ep.transport.opened()


def reconnect(cfg: Any, index: int, found: dict[str, Any]) -> LiveEndpoint:
    """An endpoint another process opened, with this process's own connections."""
    return _live(cfg, reopen_transport(cfg, index, found))


async def close_endpoint(ep: LiveEndpoint) -> None:
    await ep.transport.close()


class Router:
    """Client-side routing across endpoints: round_robin (per request), session_affinity
    (a session tree sticks to the endpoint it got at its start, trees assigned in turn),
    least_loaded (fewest requests in flight), random (seeded)."""

    def __init__(self, policy: str, endpoints: list[LiveEndpoint], seed: int) -> None:
        self.policy = policy
        self.endpoints = endpoints
        self._rr = 0
        self._trees = 0
        self._rng = choice_rng(seed, "routing")

    def tree_endpoint(self, ordinal: int | None = None) -> int:
        """The sticky endpoint of a new tree (used by session_affinity): trees in turn, by
        their ordinal in the run when given (the same in every worker process)."""
        if ordinal is not None:
            return ordinal % len(self.endpoints)
        i = self._trees % len(self.endpoints)
        self._trees += 1
        return i

    def pick(self, sticky: int) -> int:
        """The endpoint of the next request; one given up as unreachable is passed over
        (for the next one alive in order) while any other is alive."""
        n = len(self.endpoints)
        if n == 1:
            return 0
        i = self._pick(sticky, n)
        if not self.endpoints[i].dead:
            return i
        alive = [(i + k) % n for k in range(1, n) if not self.endpoints[(i + k) % n].dead]
        return alive[0] if alive else i

    def _pick(self, sticky: int, n: int) -> int:
        if self.policy == "session_affinity":
            return sticky
        if self.policy == "round_robin":
            i = self._rr % n
            self._rr += 1
            return i
        if self.policy == "least_loaded":
            start = self._rr % n
            self._rr += 1
            order = [(start + k) % n for k in range(n)]
            live = [i for i in order if not self.endpoints[i].dead] or order
            return min(live, key=lambda i: self.endpoints[i].inflight)
        if self.policy == "random":
            return int(self._rng.integers(0, n))
        raise ValueError(f"unknown routing policy {self.policy!r}")
