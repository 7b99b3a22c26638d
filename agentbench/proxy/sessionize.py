"""Recorded calls into sessions, subagents and think times (docs/architecture.md#traces): a
pure function of the calls, so a recording can be rebuilt from its journal at any time.

Sessions, in this order of evidence:

1. an explicit key: the session header (``X-Session-ID``) or the body's ``user`` field;
2. prompt + response: a call whose messages contain an earlier call's whole prompt
   followed by that call's response (as the assistant message: same content and tool
   call ids) continues that call's session when it was the session's last call, and
   **forks** from it otherwise (the child inherits the context up to that turn);
3. prompt prefix: a call whose messages strictly extend a session's last prompt (the
   agent edited the response, e.g. dropped its reasoning) continues that session;
4. otherwise the call starts a new session.

Subagents. A new session with an explicit parent (the ``X-Parent-Session-ID`` header) or,
with ``subagents="infer"``, one that starts while another session is open (that session
has sent a call before and sends another after the new one starts) is that session's
child: a **spawn** (fresh context) unless rule 2 made it a fork. Among several open
sessions the parent is the one whose last response ended most recently before the child
started (an agent dispatches a subagent right after the response that asked for it).
``parent_turn`` is the parent's last turn that ended before the child's first call;
``join_turn`` the parent's first turn sent after the child's last response ended (None:
the child ran in the background to the parent's end). Two independent agents recorded at
once look the same as a parent and its subagent: give them session keys and
``subagents="off"``, or the parent header.

Times: ``t`` = arrival - the session's first arrival; ``think_s`` = arrival - the end of
the session's previous response (for a child's first turn: of its parent's ``parent_turn``,
or the parent's own start when it has none, which is when replay starts the child; 0 for
a root's first turn), so a fork recorded after its sibling continuation replays after
it too; ``api_s`` = end - arrival;
``start_s`` = the session's first arrival - the recording's first arrival.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from agentbench.proxy.calls import Call
from agentbench.traces.model import Relation, Session, Trace, Turn

NS = 1_000_000_000


@dataclass
class _S:
    calls: list[Call] = field(default_factory=list)
    key: str | None = None
    parent: _S | None = None
    relation: Relation = "root"
    parent_turn: int | None = None
    explicit_parent: str | None = None


def group(calls: Sequence[Call]) -> list[_S]:
    """Calls (successful ones, in arrival order) grouped into sessions by the rules above;
    forks already linked to their parent."""
    ordered = sorted((c for c in calls if c.ok), key=lambda c: (c.arrival_ns, c.index))
    sessions: list[_S] = []
    by_key: dict[str, _S] = {}
    replies: dict[int, tuple[_S, int]] = {}  # reply digest -> (session, turn)
    prompts: dict[int, tuple[_S, int]] = {}  # last prompt digest -> (session, turn)

    def ended(hit: tuple[_S, int] | None, c: Call) -> tuple[_S, int] | None:
        if hit is None or hit[0].calls[hit[1]].end_ns > c.arrival_ns:
            return None
        return hit

    for c in ordered:
        s: _S | None = None
        if c.session_key is not None:
            s = by_key.get(c.session_key)
            if s is None:
                s = by_key[c.session_key] = _S(key=c.session_key,
                                               explicit_parent=c.parent_key)
                sessions.append(s)
        else:
            hit = None
            for k in range(len(c.prefixes) - 1, -1, -1):  # longest first
                hit = ended(replies.get(c.prefixes[k]), c)
                if hit is not None:
                    break
            if hit is None:
                for k in range(len(c.prefixes) - 2, -1, -1):  # strict prefix of a last prompt
                    h = ended(prompts.get(c.prefixes[k]), c)
                    if h is not None and h[1] == len(h[0].calls) - 1:
                        hit = h
                        break
            if hit is not None and hit[1] == len(hit[0].calls) - 1:
                s = hit[0]
            else:
                s = _S(explicit_parent=c.parent_key)
                if hit is not None:
                    s.parent, s.relation, s.parent_turn = hit[0], "fork", hit[1]
                sessions.append(s)
        s.calls.append(c)
        turn = len(s.calls) - 1
        replies[c.reply] = (s, turn)
        if c.prefixes:
            prompts[c.prefixes[-1]] = (s, turn)
    return sessions


def _link(sessions: list[_S], infer: bool) -> None:
    """Parents of sessions that are not forks: explicit, else inferred from timing."""
    by_key = {s.key: s for s in sessions if s.key is not None}
    for i, s in enumerate(sessions):
        if s.parent is not None:
            continue
        a = s.calls[0].arrival_ns
        if s.explicit_parent is not None:
            p = by_key.get(s.explicit_parent)
            if p is not None and _before(p, s):
                s.parent, s.relation = p, "spawn"
                s.parent_turn = _last_ended(p, a)
            continue
        if not infer:
            continue
        best: tuple[int, _S] | None = None
        for p in sessions[:i]:  # started before s
            if p.calls[0].arrival_ns >= a or p.calls[-1].arrival_ns <= a:
                continue  # not open when s started
            k = _last_ended(p, a)
            end = p.calls[k].end_ns if k is not None else -1
            if best is None or end > best[0]:
                best = (end, p)
        if best is not None:
            s.parent, s.relation = best[1], "spawn"
            s.parent_turn = _last_ended(best[1], a)


def _before(p: _S, s: _S) -> bool:
    return (p.calls[0].arrival_ns, p.calls[0].index) < (s.calls[0].arrival_ns,
                                                         s.calls[0].index)


def _last_ended(p: _S, at_ns: int) -> int | None:
    k = None
    for j, c in enumerate(p.calls):
        if c.arrival_ns > at_ns:
            break
        if c.end_ns <= at_ns:
            k = j
    return k


def _join(s: _S) -> int | None:
    assert s.parent is not None
    done = max(c.end_ns for c in s.calls)
    for j, c in enumerate(s.parent.calls):
        if c.arrival_ns >= done and (s.parent_turn is None or j > s.parent_turn):
            return j
    return None


def sessionize(calls: Sequence[Call], *, subagents: str = "infer",
               name: str = "recording", source: str = "recording") -> tuple[Trace, list[Call]]:
    """The trace of ``calls`` and, in the native turns table's row order (sessions in
    order, then turns), the call behind each turn."""
    if subagents not in ("infer", "off"):
        raise ValueError(f"subagents must be infer or off, got {subagents!r}")
    groups = group(calls)
    _link(groups, subagents == "infer")
    if not groups:
        return Trace([], name=name), []
    t0 = min(s.calls[0].arrival_ns for s in groups)
    ids: dict[int, str] = {}
    order = _tree_order(groups)
    out: list[Session] = []
    rows: list[Call] = []
    for n, s in enumerate(order):
        sid = s.key if s.key is not None else f"session-{n:04d}"
        ids[id(s)] = sid
        first = s.calls[0].arrival_ns
        turns = []
        for k, c in enumerate(s.calls):
            think = max(0, c.arrival_ns - _ready_ns(s, k))
            turns.append(Turn(
                turn=k, t=(c.arrival_ns - first) / NS, think_s=think / NS,
                api_s=max(0, c.end_ns - c.arrival_ns) / NS, input_tokens=c.input_tokens,
                output_tokens=c.output_tokens,
                hash_ids=np.asarray(c.hash_ids, dtype=np.int64), block_size=c.block_size,
                cached_tokens=c.cached_tokens))
            rows.append(c)
        out.append(Session(
            session_id=sid, parent_id=ids[id(s.parent)] if s.parent is not None else None,
            relation=s.relation, parent_turn=s.parent_turn,
            join_turn=_join(s) if s.parent is not None else None,
            model=s.calls[0].model, source=f"{source}#record", scope=source,
            start_s=(first - t0) / NS, turns=turns))
    trace = Trace(out, name=name)
    trace.validate()
    return trace, rows


def _ready_ns(s: _S, k: int) -> int:
    """When replay starts turn ``k`` of ``s`` (its think time counts from there): the
    previous response's end; for a child's first turn, the end of its parent's
    ``parent_turn``, or without one the parent's own start (where the parent's first think
    time counts from, up the tree); a root's first turn, its own arrival."""
    if k:
        return s.calls[k - 1].end_ns
    if s.parent is None:
        return s.calls[0].arrival_ns
    if s.parent_turn is None:
        return _ready_ns(s.parent, 0)
    return s.parent.calls[s.parent_turn].end_ns


def _tree_order(groups: list[_S]) -> list[_S]:
    """Sessions by start, parents always before their children."""
    by_start = sorted(groups, key=lambda s: (s.calls[0].arrival_ns, s.calls[0].index))
    placed: set[int] = set()
    out: list[_S] = []

    def place(s: _S) -> None:
        if id(s) in placed:
            return
        if s.parent is not None:
            place(s.parent)
        placed.add(id(s))
        out.append(s)

    for s in by_start:
        place(s)
    return out
