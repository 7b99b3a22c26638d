"""A session's state as its tree replays it, and the sessions.parquet row it ends as
(docs/metrics.md: a session's status, makespan and LLM wait)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentbench.replay.overflow import CONTEXT_OVERFLOW
from agentbench.results import schema as records
from agentbench.traces.model import Session


@dataclass
class SessionState:
    session: Session
    first_turn: int
    endpoint: str | None = None
    turns_done: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    llm_wait_ns: int = 0
    #: the trace's own LLM time (api_s) of the requests in ``llm_wait_ns``; None once one
    #: of them has none
    recorded_llm_ns: int | None = 0
    input_tokens: int = 0
    output_tokens: int = 0
    errors: int = 0
    cancelled: bool = False
    overflowed: bool = False  # ended at a context overflow (its later turns not sent)
    phases: set[str] = field(default_factory=set)


def plus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def session_row(sess: Session, st: SessionState | None, tree_end: int | None, *,
                stage: str, tree_id: str, lane: int, copy: int) -> dict[str, Any]:
    """The sessions.parquet row of ``sess`` (``st``: its state, None when it never
    started), ``tree_end`` the last end of any session of its tree."""
    planned = len(sess.turns) - (st.first_turn if st else 0)
    if st is None:
        st = SessionState(sess, 0)
    if st.cancelled:
        status = records.CANCELLED
    elif st.overflowed:
        status = CONTEXT_OVERFLOW  # ended at its first overflow: later turns unsent
    elif st.errors:
        status = records.ERROR
    elif st.turns_done < planned:
        status = records.INCOMPLETE
    else:
        status = records.OK
    is_root = sess.parent_id is None
    makespan = (tree_end - st.start_ns if is_root and st.start_ns is not None
                and tree_end is not None else None)
    return {
        "stage": stage,
        "phase": records.WARMUP if st.phases == {records.WARMUP} else records.MEASURE,
        "tree_id": tree_id, "session_id": sess.session_id,
        "parent_id": sess.parent_id, "relation": sess.relation, "lane": lane,
        "copy": copy, "endpoint": st.endpoint, "turns_planned": planned,
        "turns_done": st.turns_done, "start_ns": st.start_ns, "end_ns": st.end_ns,
        "makespan_ns": makespan,
        "llm_wait_ns": st.llm_wait_ns if is_root and st.turns_done else None,
        "recorded_llm_ns": (st.recorded_llm_ns if is_root and st.turns_done
                            else None),
        "input_tokens": st.input_tokens, "output_tokens": st.output_tokens,
        "status": status,
    }
