"""Weka / kv-cache-tester traces (Claude Code, SemiAnalysis AgentX): one JSON file per
root session, ``requests`` in order, nested ``type: "subagent"`` markers carrying their
own ``requests``.

A marker becomes a **spawn** session (Claude Code subagents start from their own system
prompt). It starts after the last parent request before the marker (``parent_turn``) and
the next parent request after it waits for it (``join_turn``), unless its status is
``async_launched``: then it runs in the background (``join_turn`` None).

Timestamps. ``t`` is "seconds from conversation start" (kv-cache-tester,
``docs/trace_replay_tester.md``) and a subagent's own requests count from the subagent's
start. A marker's ``t`` is where the subagent **ended** on its parent's clock: in the
kv-cache-tester corpus ``t - duration_ms`` falls 0.09-1.0 s after the parent request
that launched it ended, subagents launched together share that start, and the subagent's
requests all end before ``t`` (docs/traces.md has the figures). So by default
(``subagent_start="end_minus_duration"``) a child starts at ``t - duration_ms / 1000``,
never before the parent request it follows; ``subagent_start="marker"`` reads the
marker's ``t`` as the start instead (kv-cache-tester's replayer does, and a marker
without ``duration_ms`` always does). Two variants kv-cache-tester never writes are
tolerated, since other exporters of the format might: nested requests already on the
parent's clock (the first one at or after the child's start, where the documented
convention has it at ~0) are shifted back by that start; and files whose ``t`` is in
milliseconds (start-to-start gaps ~1000x the recorded ``think_time`` + ``api_time``) are
converted. Requests are listed in time order: a ``t`` below zero or before the previous
request's is an error naming the request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.readers import read_files, trace_files
from agentbench.traces.readers._fields import (
    load_json,
    opt_num,
    req_hash_ids,
    req_int,
    req_num,
    req_tokens,
)
from agentbench.traces.readers._text import reject_unknown

REQUEST_TYPES = frozenset({"n", "s", "request", None})
#: how a subagent marker's ``t`` is read: the subagent's end (start = ``t - duration_ms``,
#: what the recorded corpora show) or its start
SUBAGENT_STARTS = ("end_minus_duration", "marker")


def read(source: str | Path, *, skip_bad: bool = False,
         subagent_start: str = "end_minus_duration", sessions: list[str] | None = None,
         **options: Any) -> Trace:
    """Read one Weka trace file or a folder of them (one root session per file). With
    ``sessions`` (roots a filter keeps), a folder where each is the file of its name is
    read for those files alone (a 710-file folder took 7 s whole), and the other files
    are not opened; otherwise, or when one of those files is bad, whole (the bad files
    are then named as without a filter)."""
    reject_unknown(options, "weka")
    _check_subagent_start(subagent_start)
    path = Path(source)

    def read_one(f: Path) -> list[Session]:
        return _read_file(f, subagent_start)

    if sessions is not None and path.is_dir():
        wanted = set(sessions)
        files = [f for f in trace_files(path, (".json",)) if f.stem in wanted]
        if len(files) == len(wanted):
            try:
                per_file, _ = read_files(path, (".json",), read_one, skip_bad=False,
                                         files=files)
            except InputError:
                per_file = []
            if per_file and {ss[0].session_id for ss in per_file} == wanted:
                return _trace(per_file, path, [])
    per_file, skipped = read_files(path, (".json",), read_one, skip_bad=skip_bad)
    return _trace(per_file, path, skipped)


def _trace(per_file: list[list[Session]], path: Path, skipped: list[str]) -> Trace:
    trace = Trace([s for ss in per_file for s in ss], name=path.stem, skipped=skipped)
    trace.validate()
    return trace


def _check_subagent_start(value: Any) -> None:
    if value not in SUBAGENT_STARTS:
        raise InputError(f"expected one of {', '.join(SUBAGENT_STARTS)}, got {value!r}",
                         field="subagent_start")


def _read_file(file: Path, subagent_start: str) -> list[Session]:
    doc = load_json(file)
    try:
        sessions = read_document(doc, source=str(file), subagent_start=subagent_start)
    except InputError as e:
        raise e.located(source=str(file)) from None
    Trace(sessions).validate()
    return sessions


def read_document(doc: Any, *, source: str,
                  subagent_start: str = "end_minus_duration") -> list[Session]:
    """The root session of one Weka document, then its subagents (depth first)."""
    _check_subagent_start(subagent_start)
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object with 'requests'")
    if "requests" not in doc or not isinstance(doc["requests"], list):
        raise InputError("missing or not a list", field="requests")
    block_size = req_int(doc, "block_size") if "block_size" in doc else 64
    if block_size <= 0:
        raise InputError("must be positive", field="block_size")
    trace_id = str(doc.get("id") or Path(source).stem)
    scope = "global" if doc.get("hash_id_scope") == "global" else trace_id
    root = Session(
        session_id=trace_id, parent_id=None, relation="root", parent_turn=None,
        join_turn=None, model=_model(doc, None), source=f"{source}#weka", scope=scope,
        start_s=0.0,
    )
    out = [root]
    _fill(root, doc["requests"], "requests", block_size, out, start=None,
          subagent_start=subagent_start)
    return out


def _fill(session: Session, requests: list[Any], where: str, block_size: int,
          out: list[Session], start: float | None, subagent_start: str) -> None:
    """Turn ``requests`` into ``session.turns``; markers become child sessions in ``out``.

    ``start``: a child's start on its parent's clock (None for a root)."""
    scale = _time_scale(requests)
    # Child clock: subtract the child's start when its first request sits on the parent's
    # clock (at or after that start).
    offset = 0.0
    first = next((r for r in requests if isinstance(r, dict) and r.get("type") != "subagent"),
                 None)
    if start is not None and first is not None and start > 0:
        t0 = first.get("t")
        if isinstance(t0, int | float) and t0 * scale >= start:
            offset = start
    pending: list[tuple[Session, bool]] = []  # children waiting for the next parent turn
    prev_end: float | None = None
    prev_t: tuple[float, Any] | None = None  # (on this clock, as written)
    n_sub = 0
    for i, rec in enumerate(requests):
        here = f"{where}[{i}]"
        if not isinstance(rec, dict):
            raise InputError("expected an object", where=here)
        try:
            if rec.get("type") == "subagent":
                n_sub += 1
                child = _child(session, rec, here, n_sub, block_size, out, scale, offset,
                               prev_t[0] if prev_t is not None else 0.0, subagent_start)
                blocking = rec.get("status") != "async_launched"
                pending.append((child, blocking))
                continue
            kind = rec.get("type")
            if not isinstance(kind, str | None) or kind not in REQUEST_TYPES:
                raise InputError(f"unknown request type {rec.get('type')!r}", field="type")
            idx = len(session.turns)
            t = req_num(rec, "t", nonneg=True) * scale - offset
            if prev_t is not None and t < prev_t[0]:  # requests are listed in time order
                raise InputError(f"{rec['t']} is before the previous request's {prev_t[1]}",
                                 field="t")
            prev_t = (t, rec["t"])
            api = opt_num(rec, "api_time", nonneg=True)
            think = opt_num(rec, "think_time", nonneg=True)
            if think is None:
                think = max(0.0, t - prev_end) if prev_end is not None else 0.0
            inp = req_tokens(rec, "in")
            turn = Turn(
                turn=idx, t=max(t, 0.0), think_s=think, api_s=api,
                input_tokens=inp, output_tokens=req_tokens(rec, "out"),
                hash_ids=req_hash_ids(rec, tokens=inp, block_size=block_size),
                block_size=block_size,
            )
            turn.validate()
        except InputError as e:
            raise e.located(where=here) from None
        session.turns.append(turn)
        prev_end = turn.t + (api or 0.0)
        for child, blocking in pending:
            if blocking:
                child.join_turn = idx
        pending.clear()


def _child(parent: Session, rec: dict[str, Any], where: str, k: int, block_size: int,
           out: list[Session], scale: float, parent_offset: float, after_t: float,
           subagent_start: str) -> Session:
    """The spawn session of marker ``rec``; ``after_t``: the start of the parent request
    it follows (on the parent's clock less ``parent_offset``)."""
    reqs = rec.get("requests")
    if not isinstance(reqs, list):
        raise InputError("subagent marker without a requests list", field="requests")
    start = req_num(rec, "t", nonneg=True) * scale  # on the parent's clock as written
    duration_ms = opt_num(rec, "duration_ms", nonneg=True)
    if subagent_start == "end_minus_duration" and duration_ms is not None:
        # t is the subagent's end; it began after the parent request it follows
        start = max(start - duration_ms / 1000, after_t + parent_offset, 0.0)
    agent = str(rec.get("agent_id") or f"sub{k}")
    child = Session(
        session_id=f"{parent.session_id}/{agent}", parent_id=parent.session_id,
        relation="spawn", parent_turn=len(parent.turns) - 1 if parent.turns else None,
        join_turn=None, model=_model(rec, parent.model), source=parent.source,
        scope=parent.scope,
        start_s=parent.start_s + start - parent_offset,
    )
    out.append(child)
    _fill(child, reqs, f"{where}.requests", block_size, out, start=start,
          subagent_start=subagent_start)
    return child


def _model(rec: dict[str, Any], default: str | None) -> str | None:
    """The first of ``models`` (a list of names), else ``default``."""
    models = rec.get("models")
    if not models:
        return default
    if not isinstance(models, list) or not isinstance(models[0], str):
        raise InputError("expected a list of model names", field="models")
    return models[0]


def _time_scale(requests: list[Any]) -> float:
    """1.0 when ``t`` is in seconds, 0.001 when it is in milliseconds.

    Milliseconds show as start-to-start gaps ~1000x the recorded think + API time.
    """
    gaps = 0.0
    spent = 0.0
    prev: dict[str, Any] | None = None
    for rec in requests:
        if not isinstance(rec, dict) or rec.get("type") == "subagent":
            continue
        if prev is not None:
            t0, t1 = prev.get("t"), rec.get("t")
            api, think = prev.get("api_time"), rec.get("think_time")
            if all(isinstance(x, int | float) for x in (t0, t1, api, think)):
                gaps += float(t1) - float(t0)  # type: ignore[arg-type]
                spent += float(api) + float(think)  # type: ignore[arg-type]
        prev = rec
    if spent > 0 and gaps / spent > 100:
        return 0.001
    return 1.0
