"""What every session tree of a run shares (``RunContext``): the clock's timers, the
writer, the endpoints and router, the stage's request budget and its stop, and the
endpoints given up as unreachable (``agentbench.replay.retry``: the circuit breaker). When
every endpoint is given up the run stops, and says why (run.json ``stopped_reason``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentbench.prompts.layout import BlockCache
from agentbench.prompts.memo import PromptMemo
from agentbench.replay.endpoints import LiveEndpoint, Router
from agentbench.replay.retry import NS
from agentbench.replay.timers import Timers
from agentbench.results.writer import ResultsWriter
from agentbench.traces.stats import Potential
from agentbench.transport.base import Transport


class StageOver(Exception):
    """Raised in a waiting turn when its stage ended (deadline or request budget)."""


@dataclass
class RunContext:
    """What every tree of a run shares."""

    t0_ns: int
    seed: int
    strategy: str
    time_scale: float
    api_scale: float
    shared_prefix_tokens: int
    timers: Timers
    writer: ResultsWriter
    endpoints: list[LiveEndpoint]
    router: Router
    caches: dict[str, BlockCache]
    potential: Potential  # potential cached tokens by (session id, turn)
    #: the transport whose prompts every endpoint takes, when all endpoints are of one
    #: flavor (``Transport.flavor``: api, template tokens, block size), else None
    flavor: Transport | None = None
    #: prompts remembered across the variants sharing the trace (``prompts.memo``), or None
    prompt_memo: PromptMemo | None = None
    request_ids: itertools.count = field(default_factory=itertools.count)
    stage: str = ""
    stopping: bool = False
    #: the stage stops only because its request budget was taken in full, here or by
    #: another worker process (``stop_for_budget``, ``gives_up``)
    budget_spent: bool = False
    max_requests: int | None = None
    requests_sent: int = 0
    sessions_done: int = 0
    trees_done: int = 0
    on_request: Callable[[dict[str, Any]], None] | None = None
    #: worker processes share the stage's request budget: ``take(limit)`` returns the count
    #: after this request, or -1 when the budget was already spent
    shared_budget: Callable[[int], int] | None = None
    #: endpoints given up as unreachable (label -> when), and why the run stopped early
    #: (every endpoint given up): run.json ``endpoints_unreachable``, ``stopped_reason``
    unreachable: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped_reason: str | None = None
    #: why the run is being stopped before its stage's bound (SIGTERM, the results refused):
    #: the message of the requests it cancels, which the deadline's read "cancelled at
    #: the deadline" (``tree``); None: no such stop (or not yet)
    cancel_reason: str | None = None
    #: called once when the run stops early (worker processes: stop the others' lanes too)
    on_run_stopped: Callable[[], None] | None = None
    #: called when the stage stops (a warm-up waiting for its lanes ends there)
    on_stop: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        # a request still waiting for a free connection when its stage stops for good (the
        # deadline, not only a spent budget) is not sent after it
        for e in self.endpoints:
            e.transport.hold_unsent(self.gives_up)

    def take_request(self) -> bool:
        """Count one request against the stage's budget; False once the stage is over."""
        if self.stopping:
            return False
        if self.max_requests is not None and self.shared_budget is not None:
            n = self.shared_budget(self.max_requests)
            if n < 0:  # another process took the budget's last request
                self.stop_for_budget()
                return False
            self.requests_sent += 1
            if n >= self.max_requests:
                self.stop_for_budget()
            return True
        if self.max_requests is not None and self.requests_sent >= self.max_requests:
            return False
        self.requests_sent += 1
        if self.max_requests is not None and self.requests_sent >= self.max_requests:
            self.stop_for_budget()  # the last one goes; everything still waiting ends
        return True

    def stop_for_budget(self) -> None:
        """``stop`` because the stage's request budget was taken in full (here or, with
        worker processes, by another): requests waiting to reconnect go on (``gives_up``).
        Only while the stage runs: a stop for another reason stands."""
        if not self.stopping:
            self.stop()
            self.budget_spent = True

    def gives_up(self) -> bool:
        """Whether a request already sent stops trying to reach its endpoint: the stage
        stops, and not only because its budget was taken in full (a request waiting to
        reconnect holds one of those; it reaches a server or fails, as it would have)."""
        return self.stopping and not self.budget_spent

    def stop(self) -> None:
        """End the stage: no new requests; waiting turns and arrivals end now, and so do
        requests waiting to reconnect (also when the budget stopped the stage first)."""
        budget_only = self.budget_spent
        self.budget_spent = False
        if not self.stopping or budget_only:
            self.stopping = True
            self.timers.abort_all(StageOver)
            if self.on_stop is not None:
                self.on_stop()

    def endpoint_unreachable(self, ep: LiveEndpoint) -> None:
        """``ep`` was just given up (``retry.note_outcome``): routing avoids it from now on;
        once every endpoint is given up, the run stops."""
        since = ep.down_since_ns if ep.down_since_ns is not None else ep.dead_ns
        self.unreachable[ep.label] = {"endpoint": ep.label, "since_ns": since,
                                      "given_up_ns": ep.dead_ns,
                                      "reconnect_s": ep.reconnect_ns / NS}
        if self.stopped_reason is None and all(e.dead for e in self.endpoints):
            self.stopped_reason = stopped_reason(list(self.unreachable.values()))
            self.stop()
            if self.on_run_stopped is not None:
                self.on_run_stopped()

    def standstill(self, trees: int, failed: int = 0, ok: int = 0) -> None:
        """A lane ran ``trees`` session trees in a row without the clock moving (the
        requests meanwhile: ``failed`` and ``ok``): on a virtual clock the stage would
        never reach its duration. The run stops, saying why the clock stood: requests
        that failed at once, or ones that took no simulated time at all."""
        if self.stopped_reason is None:
            why = ("every request failed at once; see requests.parquet error_message"
                   if failed and not ok else
                   f"{ok:,} requests took no simulated time: the engine's steps and the "
                   "think times between turns are all zero, as with the instant preset "
                   "and timing.time_scale 0; replay the trace once (limits.recycle: "
                   "false) or give the turns think time")
            self.stopped_reason = (
                f"simulated time stood still: {trees} sessions in a row ended without the "
                f"clock moving ({why}): the run stopped")
            self.stop()
            if self.on_run_stopped is not None:
                self.on_run_stopped()

    def outcome(self) -> dict[str, Any]:
        """What run.json says about endpoints given up (nothing when none was)."""
        out: dict[str, Any] = {}
        if self.unreachable:
            out["endpoints_unreachable"] = list(self.unreachable.values())
        if self.stopped_reason is not None:
            out["stopped_reason"] = self.stopped_reason
        return out


def stopped_reason(gone: list[dict[str, Any]]) -> str:
    """One line: which endpoints were unreachable, for how long, and that the run stopped."""
    each = [f"{g['endpoint']} unreachable for {(g['given_up_ns'] - g['since_ns']) / NS:.1f} s"
            for g in gone]
    limit = max(g["reconnect_s"] for g in gone)
    what = f"endpoint {each[0]}" if len(each) == 1 else "every endpoint: " + ", ".join(each)
    return (f"{what} (connection errors and no answer for reconnect_s {limit:g} s): "
            "the run stopped")


def merged_outcomes(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Several processes' ``RunContext.outcome``: each endpoint given up once (at the
    first process's give-up), and the first reason one stopped the run for."""
    gone: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    for o in outcomes:
        for g in o.get("endpoints_unreachable", []):
            first = gone.get(g["endpoint"])
            if first is None or g["given_up_ns"] < first["given_up_ns"]:
                gone[g["endpoint"]] = g
        if "stopped_reason" in o:
            out.setdefault("stopped_reason", o["stopped_reason"])
    return {"endpoints_unreachable": list(gone.values()), **out} if gone else out
