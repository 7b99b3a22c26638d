"""Alibaba Qwen Bailian usage traces: JSONL, one request per line with ``chat_id``,
``parent_chat_id`` (-1 for a conversation's first request), ``timestamp`` (seconds),
``input_length``, ``output_length``, ``turn`` and ``hash_ids`` (16-token blocks, covering
the whole request context).

Chains of ``parent_chat_id`` become sessions: a request continues its parent's session;
when a parent has several children (in timestamp order), the first continues the session
and each later one becomes a **fork** session starting after the parent's turn
(``parent_turn``), inheriting its context. A child whose parent is not in the file (cut
off by the trace window) starts a root session; a child sent before its parent is an
error, and so is a negative timestamp. Think time is the start-to-start gap
from the parent (no response time is recorded). One hash scope per file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.readers import read_files
from agentbench.traces.readers._fields import (
    check_block_size,
    iter_jsonl,
    req_hash_ids,
    req_int,
    req_num,
    req_tokens,
)
from agentbench.traces.readers._text import reject_unknown

BLOCK_SIZE = 16


def read(source: str | Path, *, block_size: int = BLOCK_SIZE, skip_bad: bool = False,
         **options: Any) -> Trace:
    """Read a Bailian JSONL file or a folder of them (one hash scope per file)."""
    reject_unknown(options, "bailian")
    check_block_size(block_size)
    path = Path(source)

    def one(file: Path) -> list[Session]:
        rows = ((f"line {n}", rec) for n, rec in iter_jsonl(file))
        return build_sessions(rows, str(file), block_size)

    per_file, skipped = read_files(path, (".jsonl", ".json"), one, skip_bad=skip_bad)
    trace = Trace([s for ss in per_file for s in ss], name=path.stem, skipped=skipped)
    trace.validate()
    return trace



def read_records(records: Iterable[dict[str, Any]], *, source: str,
                 block_size: int = BLOCK_SIZE, **options: Any) -> Trace:
    """Read decoded records (e.g. Hugging Face dataset rows) as one Bailian file."""
    reject_unknown(options, "bailian")
    check_block_size(block_size)
    rows = ((f"record {i}", rec) for i, rec in enumerate(records))
    trace = Trace(build_sessions(rows, source, block_size), name=Path(source).name or source)
    trace.validate()
    return trace


class _Req:
    __slots__ = ("chat_id", "parent", "ts", "turn", "where")

    def __init__(self, chat_id: int, parent: int, ts: float, turn: Turn, where: str) -> None:
        self.chat_id = chat_id
        self.parent = parent
        self.ts = ts
        self.turn = turn
        self.where = where


def build_sessions(rows: Iterable[tuple[str, dict[str, Any]]], source: str,
                   block_size: int) -> list[Session]:
    reqs: list[_Req] = []
    by_id: dict[int, _Req] = {}
    for where, rec in rows:
        try:
            if not isinstance(rec, dict):
                raise InputError("expected a JSON object")
            chat_id = req_int(rec, "chat_id", nonneg=False)
            parent = req_int(rec, "parent_chat_id", nonneg=False) if rec.get(
                "parent_chat_id") is not None else -1
            inp = req_tokens(rec, "input_length")
            turn = Turn(
                turn=0, t=0.0, think_s=0.0, api_s=None, input_tokens=inp,
                output_tokens=req_tokens(rec, "output_length"),
                hash_ids=req_hash_ids(rec, tokens=inp, block_size=block_size),
                block_size=block_size,
            )
            ts = req_num(rec, "timestamp", nonneg=True)
            turn.validate()
            if chat_id in by_id:
                raise InputError(f"duplicate chat_id {chat_id}", field="chat_id")
            if parent == chat_id:
                raise InputError("a request cannot be its own parent", field="parent_chat_id")
        except InputError as e:
            raise e.located(source=source, where=where) from None
        req = _Req(chat_id, parent, ts, turn, where)
        reqs.append(req)
        by_id[chat_id] = req
    if not reqs:
        raise InputError("no requests", source=source)
    children: dict[int, list[_Req]] = {}
    for q in reqs:
        if q.parent in by_id:
            children.setdefault(q.parent, []).append(q)
    stem = Path(source).stem
    src = f"{source}#bailian"
    t0 = min(r.ts for r in reqs)
    sessions: list[Session] = []
    roots = sorted((q for q in reqs if q.parent not in by_id), key=lambda q: q.ts)
    # (first request of a session, parent session, parent turn, parent request), depth first
    Item = tuple[_Req, Session | None, int | None, _Req | None]
    stack: list[Item] = [(q, None, None, None) for q in reversed(roots)]
    while stack:
        head, parent_s, parent_turn, prev = stack.pop()
        s = Session(
            session_id=f"{stem}:{head.chat_id}",
            parent_id=parent_s.session_id if parent_s else None,
            relation="fork" if parent_s else "root", parent_turn=parent_turn,
            join_turn=None, model=None, source=src, scope=source,
            start_s=head.ts - t0,
        )
        sessions.append(s)
        forks: list[Item] = []
        r: _Req | None = head
        while r is not None:
            if prev is not None and r.ts < prev.ts:
                raise InputError(f"{r.ts} is before its parent's {prev.ts}", source=source,
                                 where=r.where, field="timestamp")
            turn = r.turn
            turn.turn = len(s.turns)
            turn.t = r.ts - head.ts
            turn.think_s = max(0.0, r.ts - prev.ts) if prev is not None else 0.0
            s.turns.append(turn)
            kids = sorted(children.get(r.chat_id, []), key=lambda c: c.ts)
            forks.extend((k, s, turn.turn, r) for k in kids[1:])
            prev, r = r, (kids[0] if kids else None)
        stack.extend(reversed(forks))
    # a cycle of parent links never reaches a root: report it instead of dropping it
    placed = sum(len(s.turns) for s in sessions)
    if placed != len(reqs):
        seen = {id(t) for s in sessions for t in s.turns}
        lost = next(q for q in reqs if id(q.turn) not in seen)
        raise InputError("parent_chat_id links form a cycle", source=source, where=lost.where,
                         field="parent_chat_id")
    return sessions
