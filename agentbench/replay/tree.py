"""Replaying one session tree inside its lane (docs/architecture.md#replay): the root's
turns in order, forks and spawns started when their parent reaches ``parent_turn``, a parent
turn with ``join_turn`` waiting for its children, background children running beside it.

A join turn is sent at the latest of its own timing target and, for each child joined
there, that child's end plus the pause the trace recorded between the child's last
response and the join turn (``join_pause``): in recorded traces the join turn's think time
already covers the subagents' run, so it is not added again after them, and a child that
runs longer than recorded pushes the join turn back without losing the pause after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from typing import Any

from agentbench.prompts.layout import salt_for
from agentbench.replay.context import RunContext, StageOver
from agentbench.replay.endpoints import LiveEndpoint
from agentbench.replay.overflow import CONTEXT_OVERFLOW
from agentbench.replay.retry import CONNECT_ERRORS, note_outcome, retry_delay_ns, retryable
from agentbench.replay.schedule import NS, turn_target_ns
from agentbench.replay.sessionrow import SessionState, plus, session_row
from agentbench.replay.treespec import TreeSpec
from agentbench.replay.warmup import LaneWarmup
from agentbench.results import schema as records
from agentbench.results.schema import RequestRecord
from agentbench.traces.model import Session
from agentbench.transport.base import Transport
from agentbench.transport.finish import finish_record


class TreeRun:
    """One copy of a tree in one lane."""

    def __init__(self, ctx: RunContext, spec: TreeSpec, copy: int, lane: int,
                 warm_turn: int | None, ordinal: int | None = None,
                 warm: LaneWarmup | None = None) -> None:
        self.ctx = ctx
        #: the lane's warmup (shared by its trees): a budget of requests when it has more
        #: than one, else the warm start's own turn is the lane's one warmup request
        self.warm = warm
        self.spec = spec
        self.copy = copy
        self.lane = lane
        self.warm_turn = warm_turn
        self.tree_id = f"{spec.root.session_id}#{copy}"
        self.stage = ctx.stage
        self.sticky = ctx.router.tree_endpoint(ordinal)
        self.salts = {s.scope: salt_for(ctx.seed, copy, s.scope) for s in spec.sessions}
        self.states: dict[str, SessionState] = {}
        self.tasks: list[asyncio.Task[Any]] = []
        self.prompts: dict[tuple[str, str, int, int | None], Any] = {}

    async def run(self, start_ns: int | None = None) -> None:
        """Replay the whole tree from ``start_ns`` (default: now); session rows are written
        whatever happens."""
        for c in self.ctx.caches.values():
            for salt in self.salts.values():
                c.acquire(salt)
        first = self.warm_turn or 0
        content = None
        try:
            if start_ns is None and self.ctx.flavor and first < len(self.spec.root.turns):
                # closed loop: the lane's agent starts once its first prompt is built (the
                # blocks of a new tree cost ~15 us each), so lanes starting together do not
                # count each other's prompt building as schedule lag; each lane builds in
                # its own loop iteration (a timer slot), so streams in flight stay stamped
                with contextlib.suppress(StageOver):
                    await self.ctx.timers.wait_until(self.ctx.timers.now_ns(), pullable=False)
                content = self._content(self.spec.root, first, self.ctx.flavor)
            start = self.ctx.timers.now_ns() if start_ns is None else start_ns
            await self._session(self.spec.root, start, first, content)
        finally:
            for t in self.tasks:
                if not t.done():
                    t.cancel()
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
            for c in self.ctx.caches.values():
                for salt in self.salts.values():
                    c.release(salt)
            self._write_sessions()
            self.ctx.trees_done += 1

    async def _session(self, sess: Session, ready_ns: int, first: int,
                       first_content: Any = None) -> int:
        """Run one session's turns from ``first`` (``first_content``: that turn's prompt,
        when built already); return when its own last turn ended."""
        ctx = self.ctx
        st = SessionState(sess, first)
        self.states[sess.session_id] = st
        kids_after = self.spec.children_after.get(sess.session_id, {})
        joins = self.spec.joins.get(sess.session_id, {})
        started: dict[str, asyncio.Task[int]] = {}
        if first == 0:
            self._start_children(kids_after.get(None, []), ready_ns, started)
        prev = None
        prev_sent: int | None = None
        session_start = ready_ns
        first_t = sess.turns[first].t if first < len(sess.turns) else 0.0
        try:
            for k in range(first, len(sess.turns)):
                turn = sess.turns[k]
                own_target = turn_target_ns(
                    ctx.strategy, turn, prev=prev, ready_ns=ready_ns, prev_sent_ns=prev_sent,
                    session_start_ns=session_start, first_t=first_t,
                    time_scale=ctx.time_scale, api_scale=ctx.api_scale)
                if k == first and first > 0:  # a warm start sends its turn at once
                    own_target = ready_ns
                if k == first:  # ``original`` spacing counts from when this turn was due
                    session_start = own_target
                target = own_target
                joined = [started[c] for c in joins.get(k, []) if c in started]
                if joined:
                    await asyncio.gather(*joined, return_exceptions=True)
                    ends = [(t.result() + self._pause_ns(cid), cid)
                            for cid, t in started.items()
                            if t in joined and not t.cancelled() and t.exception() is None]
                    if ends:
                        last_end, last_id = max(ends)
                        if last_end > own_target:
                            kid = self.states[last_id]
                            st.llm_wait_ns += kid.llm_wait_ns
                            st.recorded_llm_ns = plus(st.recorded_llm_ns,
                                                       kid.recorded_llm_ns)
                        target = max(own_target, last_end)
                if ctx.stopping:
                    break
                # build the prompt while waiting is still ahead (outside schedule lag when
                # there is think time); mixed-API endpoint sets build it after routing
                if k == first and first_content is not None:
                    content = first_content
                else:
                    content = self._content(sess, k, ctx.flavor) if ctx.flavor else None
                try:
                    scheduled = await ctx.timers.wait_until(target)
                except StageOver:
                    break
                if not ctx.take_request():
                    break
                phase, counted = self._phase(sess, k)
                try:
                    rec = await self._request(sess, st, k, scheduled, phase, content)
                except StageOver:  # stopped while its connection backoff ran: never sent
                    break
                finally:
                    if counted:
                        self.warm.ended()  # type: ignore[union-attr]
                if rec.error_type == CONTEXT_OVERFLOW:
                    st.overflowed = True  # every later turn is longer still: end here
                    break
                prev, prev_sent = turn, rec.sent_ns
                ready_ns = rec.end_ns if rec.end_ns is not None else ctx.timers.now_ns()
                self._start_children(kids_after.get(k, []), ready_ns, started)
        except BaseException:
            for t in started.values():
                t.cancel()
            raise
        finally:
            if started:
                # background children (and any not joined) finish with the session
                await asyncio.gather(*started.values(), return_exceptions=True)
        return st.end_ns if st.end_ns is not None else ready_ns

    def _pause_ns(self, child_id: str) -> int:
        """The recorded pause after joined child ``child_id``, scaled as think times are."""
        pause = self.spec.join_pause.get(child_id)
        return int(round(pause * self.ctx.time_scale * NS)) if pause else 0

    def _phase(self, sess: Session, k: int) -> tuple[str, bool]:
        """Warmup or measure, and whether the request counts toward the lane's warmup: the
        warm start's turn, or the lane's first ``warmup.requests_per_lane`` requests when
        it warms up with a budget; then, until every lane is warm (the profiling phase,
        :mod:`.warmup`), its requests stay warmup without counting."""
        w = self.warm
        if w is not None and w.budgeted:
            if w.take():
                return records.WARMUP, True
        elif self.warm_turn is not None and sess is self.spec.root and k == self.warm_turn:
            return records.WARMUP, w is not None and w.take()
        if w is not None and not w.profiling():
            return records.WARMUP, False
        return records.MEASURE, False

    def _start_children(self, kids: list[Session], ready_ns: int,
                        started: dict[str, asyncio.Task[int]]) -> None:
        for child in kids:
            task = asyncio.ensure_future(self._session(child, ready_ns, 0))
            started[child.session_id] = task
            self.tasks.append(task)

    def _content(self, sess: Session, k: int, transport: Transport) -> Any:
        """Turn ``k``'s prompt as ``transport`` takes it (text fragments, block hashes:
        its own prompt builder), built once per session and transport flavor."""
        key = (sess.session_id, *transport.flavor)
        builder = self.prompts.get(key)
        if builder is None:
            builder = transport.prompt_builder(self.ctx.caches, self.salts[sess.scope],
                                               sess.session_id, self.ctx.shared_prefix_tokens,
                                               sess.turns)
            if self.ctx.prompt_memo is not None:
                builder = self.ctx.prompt_memo.wrap(builder)
            self.prompts[key] = builder
        nxt = sess.turns[k + 1] if k + 1 < len(sess.turns) else None
        return builder.build(sess.turns[k], nxt)

    async def _request(self, sess: Session, st: SessionState, k: int, scheduled: int,
                       phase: str, content: list[bytes] | None) -> RequestRecord:
        """Send turn ``k`` (again, under the endpoint's retry policy) and record each
        attempt."""
        ctx = self.ctx
        ep = ctx.endpoints[ctx.router.pick(self.sticky)]
        if content is None:
            content = self._content(sess, k, ep.transport)
        attempt = 1
        refused_since: int | None = None
        last: RequestRecord | None = None
        while True:
            try:
                rec = await self._attempt(sess, st, k, scheduled, phase, content, ep)
            except StageOver:  # the next attempt was never sent: the last one counts
                if last is None:
                    raise
                self._again(st, last, undo=True)
                return last
            last = rec
            if rec.error_type in CONNECT_ERRORS and not ctx.gives_up():
                # the request never reached the server: try again (after the endpoint's
                # backoff) within reconnect_s, without spending the request budget, unless
                # the endpoint was given up meanwhile (``retry``: the circuit breaker)
                now = ctx.timers.now_ns()
                refused_since = now if refused_since is None else refused_since
                if now - refused_since < ep.reconnect_ns and not ep.dead:
                    due = await self._backoff(ep)
                    if not ctx.gives_up() and not ep.dead:
                        self._again(st, rec)
                        scheduled = max(scheduled, due)
                        continue
                    return rec
            refused_since = None
            policy = ep.retry
            if policy is None or attempt >= policy.max_attempts or ctx.stopping \
                    or ep.dead or not retryable(rec, policy):
                return rec
            wait = retry_delay_ns(attempt, policy, rec.retry_after_s)
            attempt += 1
            try:
                scheduled = await ctx.timers.wait_until(ctx.timers.now_ns() + wait,
                                                        pullable=False)
            except StageOver:
                return rec
            if not ctx.take_request():
                return rec
            self._again(st, rec)

    async def _backoff(self, ep: LiveEndpoint) -> int:
        """Wait out ``ep``'s connection backoff, before a turn's first attempt or a
        reconnect; the budget taken in full meanwhile ends the other waits, not this one
        (its request holds one of the budget's). Returns when the backoff let the request
        go: it is due then, the wait being the server's doing, not the client's lag (read
        as client saturation while a server was down)."""
        timers = self.ctx.timers
        until = ep.blocked_until_ns
        while True:
            try:
                await timers.wait_until(ep.blocked_until_ns, pullable=False)
                return until
            except StageOver:
                if self.ctx.gives_up():
                    return until

    @staticmethod
    def _again(st: SessionState, rec: RequestRecord, undo: bool = False) -> None:
        """``rec`` is not the turn's last attempt: its session counts the turn (and its
        outcome) once, at the last attempt. ``undo``: it is the last after all (the next
        one was never sent)."""
        d = 1 if undo else -1
        st.turns_done += d
        if rec.status not in (records.OK, records.CANCELLED):
            st.errors += d

    async def _attempt(self, sess: Session, st: SessionState, k: int, scheduled: int,
                       phase: str, content: Any, ep: LiveEndpoint) -> RequestRecord:
        """Send turn ``k`` once to ``ep`` (after the endpoint's connection backoff) and
        record the row."""
        ctx = self.ctx
        turn = sess.turns[k]
        if ep.blocked_until_ns > ctx.timers.now_ns():
            # the turn holds a unit of the budget: see ``_backoff``
            due = await self._backoff(ep)
            if ctx.gives_up():  # the stage stopped meanwhile: sent now, it went out after
                raise StageOver  # the stop and before its time (a negative schedule lag)
            scheduled = max(scheduled, due)
        rec = RequestRecord(
            request_id=next(ctx.request_ids), stage=self.stage, phase=phase,
            endpoint=ep.label, lane=self.lane, tree_id=self.tree_id,
            session_id=sess.session_id, relation=sess.relation, copy=self.copy, turn=k,
            scheduled_ns=scheduled, expected_input_tokens=turn.input_tokens,
            expected_output_tokens=turn.output_tokens,
            potential_cached_tokens=ctx.potential.get((sess.session_id, k), 0))
        ep.inflight += 1
        ctx.timers.request_started()
        try:
            await ep.transport.send(rec, content, max(1, turn.output_tokens), self.tree_id,
                                    ctx.t0_ns)
        except BaseException:  # cancelled at the deadline: recorded all the same
            ep.inflight -= 1
            ctx.timers.request_ended()
            if ctx.cancel_reason is not None and rec.status == records.CANCELLED:
                rec.error_message = f"cancelled: {ctx.cancel_reason}"  # not the deadline
            self._record(rec, st, ep, phase)
            raise
        ep.inflight -= 1
        ctx.timers.request_ended()
        if note_outcome(ep, rec, ctx.timers.now_ns()):
            ctx.endpoint_unreachable(ep)
        try:
            # reading the stored stream waits for its turn in the loop, so that streams
            # still in flight are stamped first when many end at once (no wait when that
            # turn would run nothing else: ``Timers.waited_now``)
            if not ctx.timers.waited_now():
                await ctx.timers.wait_until(ctx.timers.now_ns(), pullable=False)
        except StageOver:
            pass
        finally:
            self._record(rec, st, ep, phase)
        return rec

    def _record(self, rec: RequestRecord, st: SessionState, ep: LiveEndpoint,
                phase: str) -> None:
        ctx = self.ctx
        row = ctx.writer.add_request(finish_record(rec), ep.amend)
        if row["error_type"] == CONTEXT_OVERFLOW:
            rec.error_type = CONTEXT_OVERFLOW
        st.phases.add(phase)
        if st.endpoint is None:
            st.endpoint = ep.label
        if st.start_ns is None:
            st.start_ns = row["sent_ns"]
        st.end_ns = row["end_ns"]
        st.turns_done += 1
        if row["status"] == records.CANCELLED:
            st.cancelled = True
        elif row["status"] != records.OK:
            st.errors += 1
        if row["sent_ns"] is not None and row["end_ns"] is not None:
            st.llm_wait_ns += row["end_ns"] - row["sent_ns"]
            api = st.session.turns[row["turn"]].api_s
            st.recorded_llm_ns = plus(st.recorded_llm_ns,
                                       None if api is None else round(api * 1e9))
        st.input_tokens += row["prompt_tokens"] or 0
        st.output_tokens += row["completion_tokens"] or 0
        if ctx.on_request is not None:  # token events as lists, as every reader gets them
            ctx.on_request({k: v.tolist() if isinstance(v, array) else v
                            for k, v in row.items()})

    def _write_sessions(self) -> None:
        tree_end = max((s.end_ns for s in self.states.values() if s.end_ns is not None),
                       default=None)
        for sess in self.spec.sessions:
            st = self.states.get(sess.session_id)
            if st is None and self.warm_turn:
                continue  # skipped by the warm start: it happened before the lane joined
            self.ctx.writer.add_session(session_row(
                sess, st, tree_end, stage=self.stage, tree_id=self.tree_id, lane=self.lane,
                copy=self.copy))
            self.ctx.sessions_done += 1
