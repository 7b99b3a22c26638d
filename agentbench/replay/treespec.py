"""A session tree as replay walks it (docs/architecture.md#replay): the root with its
descendants, which children start after which parent turn, which parent turn waits for
which children, and the pause the trace recorded after each joined child."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentbench.traces.model import Session, Trace


@dataclass
class TreeSpec:
    """A root session with its descendants, and the links replay needs."""

    root: Session
    sessions: list[Session]
    children_after: dict[str, dict[int | None, list[Session]]]  # parent id -> parent_turn ->
    joins: dict[str, dict[int, list[str]]]  # parent id -> join turn -> child ids
    join_pause: dict[str, float] = field(default_factory=dict)  # child id -> seconds


def join_pause_s(parent: Session, child: Session) -> float | None:
    """The recorded pause between ``child``'s last response and its parent's join turn, in
    seconds (at least 0), from the sessions' ``start_s``, turn ``t`` and ``api_s``; None
    when the trace lacks the child's last ``api_s`` or the turns."""
    if child.join_turn is None or child.join_turn >= len(parent.turns) or not child.turns:
        return None
    last = child.turns[-1]
    if last.api_s is None:
        return None
    child_end = child.start_s + last.t + last.api_s
    join_at = parent.start_s + parent.turns[child.join_turn].t
    return max(0.0, join_at - child_end)


def tree_specs(trace: Trace) -> list[TreeSpec]:
    """The trace's session trees, each with the links above."""
    out = []
    for sessions in trace.trees():
        after: dict[str, dict[int | None, list[Session]]] = {}
        joins: dict[str, dict[int, list[str]]] = {}
        pauses: dict[str, float] = {}
        by_id = {s.session_id: s for s in sessions}
        for s in sessions[1:]:
            assert s.parent_id is not None
            after.setdefault(s.parent_id, {}).setdefault(s.parent_turn, []).append(s)
            if s.join_turn is not None:
                joins.setdefault(s.parent_id, {}).setdefault(s.join_turn, []).append(
                    s.session_id)
                pause = join_pause_s(by_id[s.parent_id], s)
                if pause:
                    pauses[s.session_id] = pause
        out.append(TreeSpec(sessions[0], sessions, after, joins, pauses))
    return out
