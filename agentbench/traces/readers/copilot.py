"""Azure GitHub Copilot coding agent sessions (schema:
``shared/traces/formats/copilot-coding-agent.schema.json``): records of
``session_id`` -> ``turns`` -> ``llm_calls`` (token counts incl. cached, duration,
``message_metadata`` prompt segments) and ``tool_batches`` (durations, ``request_id`` =
the ``message_id`` of the call that asked for the tools). JSONL of records, a JSON array
of them, or one JSON object holding ``record`` / ``records``.

Every LLM call is a turn of its session (turns in order, calls in order). The prompt is
the segments of ``message_metadata`` in ``sequenceId`` order; a segment is identified by
(``sequenceId``, ``type``, ``role``, ``token_len``), so consecutive calls that resend the
same segments share leading blocks, and hash ids are prefix-chained block hashes of the
segment layout (``block_size``, default 64) over ``min(segment tokens, prompt tokens)``.
Think time before an agent call is the duration of the tool batches the previous call
asked for; before a user call (or when no batch is recorded) the gap from the previous
call's end. The recorded cached tokens stay in ``Turn.cached_tokens``. Calls are listed
in time order: a call stamped before the previous one (or a negative number) is an error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.traces.model import HashIds, Session, Trace, Turn
from agentbench.traces.readers import read_files
from agentbench.traces.readers._fields import (
    check_block_size,
    opt_num,
    req_int,
    req_num,
    req_tokens,
)
from agentbench.traces.readers._text import (
    DEFAULT_BLOCK_SIZE,
    iter_file_records,
    reject_unknown,
)


def read(source: str | Path, *, block_size: int = DEFAULT_BLOCK_SIZE, skip_bad: bool = False,
         **options: Any) -> Trace:
    """Read a Copilot sessions file (JSON / JSONL) or a folder of them."""
    reject_unknown(options, "copilot")
    check_block_size(block_size)
    path = Path(source)
    per_file, skipped = read_files(
        path, (".json", ".jsonl"), lambda f: _sessions(_records(f), str(f), block_size),
        skip_bad=skip_bad)
    trace = Trace([s for ss in per_file for s in ss], name=path.stem, skipped=skipped)
    trace.validate()
    return trace


def read_records(records: Iterable[dict[str, Any]], *, source: str,
                 block_size: int = DEFAULT_BLOCK_SIZE, **options: Any) -> Trace:
    """Read decoded session records (e.g. Hugging Face dataset rows)."""
    reject_unknown(options, "copilot")
    check_block_size(block_size)
    rows = ((f"record {i}", rec) for i, rec in enumerate(records))
    trace = Trace(_sessions(rows, source, block_size), name=Path(source).name or source)
    trace.validate()
    return trace


def _records(file: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for where, rec in iter_file_records(file):
        if "turns" not in rec and isinstance(rec.get("records"), list):
            for i, r in enumerate(rec["records"]):
                yield f"{where}.records[{i}]", r
        elif "turns" not in rec and isinstance(rec.get("record"), dict):
            yield f"{where}.record", rec["record"]
        else:
            yield where, rec


def _sessions(rows: Iterable[tuple[str, Any]], source: str, block_size: int) -> list[Session]:
    out: list[Session] = []
    seen: set[str] = set()
    for where, rec in rows:
        try:
            s = _session(rec, source, block_size)
            if s.session_id in seen:
                raise InputError(f"duplicate session id {s.session_id!r}", field="session_id")
        except InputError as e:
            raise e.located(source=source, where=where) from None
        seen.add(s.session_id)
        out.append(s)
    if not out:
        raise InputError("no sessions", source=source)
    t0 = min(s.start_s for s in out)
    for s in out:
        s.start_s -= t0
    return out


def _time(val: Any, field: str) -> float:
    """Seconds of an ISO-8601 timestamp (or a non-negative number of seconds)."""
    if isinstance(val, bool):
        raise InputError(f"expected a timestamp, got {val!r}", field=field)
    if isinstance(val, int | float):
        return req_num({field: val}, field, nonneg=True)
    if isinstance(val, str):
        try:
            return datetime.fromisoformat(val.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError):  # also a time out of datetime's range
            raise InputError(f"not an ISO-8601 timestamp: {val!r}", field=field) from None
    raise InputError("missing" if val is None else f"expected a timestamp, got {val!r}",
                     field=field)


def _session(rec: Any, source: str, block_size: int) -> Session:
    if not isinstance(rec, dict):
        raise InputError("expected a JSON object")
    if rec.get("session_id") in (None, ""):
        raise InputError("missing", field="session_id")
    turns_in = rec.get("turns")
    if not isinstance(turns_in, list):
        raise InputError("missing or not a list", field="turns")
    turns: list[Turn] = []
    model: str | None = None
    layout = _Layout(block_size)
    prev_end: float | None = None
    prev_id: Any = None
    prev_ts, prev_ts_raw = 0.0, None  # the previous call's start, and as written
    first: float | None = None
    for i, ct in enumerate(turns_in):
        here = f"turns[{i}]"
        if not isinstance(ct, dict) or not isinstance(ct.get("llm_calls"), list):
            raise InputError("missing or not a list", field=f"{here}.llm_calls")
        batches: dict[Any, float] = {}
        tool_batches = ct.get("tool_batches") or []
        if not isinstance(tool_batches, list):
            raise InputError("expected a list", field=f"{here}.tool_batches")
        for j, b in enumerate(tool_batches):
            if not isinstance(b, dict):
                raise InputError("expected an object", field=f"{here}.tool_batches[{j}]")
            try:
                d = opt_num(b, "duration_ms", nonneg=True) or 0.0
            except InputError as e:
                raise InputError(e.message, field=f"{here}.tool_batches[{j}].duration_ms"
                                 ) from None
            rid = _id(b.get("request_id"))
            batches[rid] = batches.get(rid, 0.0) + d / 1000
        for j, call in enumerate(ct["llm_calls"]):
            at = f"{here}.llm_calls[{j}]"
            if not isinstance(call, dict):
                raise InputError("expected an object", field=at)
            try:
                ts = _time(call.get("timestamp"), "timestamp")
                if first is not None and ts < prev_ts:  # calls are listed in time order
                    raise InputError(f"{call['timestamp']!r} is before the previous call's "
                                     f"{prev_ts_raw!r}", field="timestamp")
                dur = (opt_num(call, "duration_ms", nonneg=True) or 0.0) / 1000
                tokens = call.get("tokens")
                if not isinstance(tokens, dict):
                    raise InputError("missing or not an object", field="tokens")
                prompt = req_tokens(tokens, "prompt")
                completion = req_tokens(tokens, "completion")
                cached = (req_tokens(tokens, "cached") if tokens.get("cached") is not None
                          else None)
                hash_ids = layout.hash_ids(call.get("message_metadata"), prompt)
            except InputError as e:
                fld = f"{at}.tokens.{e.field}" if e.field in ("prompt", "completion", "cached") \
                    else f"{at}.{e.field}"
                raise InputError(e.message, field=fld) from None
            if first is None:
                first = ts
            if prev_end is None:
                think = 0.0
            elif j > 0 and prev_id in batches:
                think = batches[prev_id]
            else:
                think = max(0.0, ts - prev_end)
            turn = Turn(turn=len(turns), t=ts - first, think_s=think, api_s=dur,
                        input_tokens=prompt, output_tokens=completion, hash_ids=hash_ids,
                        block_size=block_size, cached_tokens=cached)
            try:
                turn.validate()
            except InputError as e:
                raise InputError(e.message, field=f"{at}.{e.field}") from None
            turns.append(turn)
            model = model or (call.get("model") if isinstance(call.get("model"), str) else None)
            prev_end, prev_id = ts + dur, _id(call.get("message_id"))
            prev_ts, prev_ts_raw = ts, call["timestamp"]
    return Session(
        session_id=str(rec["session_id"]), parent_id=None, relation="root", parent_turn=None,
        join_turn=None, model=model, source=f"{source}#copilot", scope=source,
        start_s=first or 0.0, turns=turns,
    )


def _id(val: Any) -> Any:
    """A message or request id as a dict key (an id that is a JSON list or object counts
    by its text)."""
    return val if isinstance(val, str | int | float | None) else repr(val)


class _Layout:
    """Block hash ids of a prompt given as segments; reuses the blocks of the longest
    segment prefix shared with the previous call."""

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        self.prev: list[tuple[int, int]] = []  # (segment key, length)
        self.full: list[int] = []

    def hash_ids(self, meta: Any, prompt: int) -> HashIds:
        if meta is None:
            return np.zeros(0, dtype=np.int64)
        if not isinstance(meta, list):
            raise InputError("expected a list of segments", field="message_metadata")
        segs: list[tuple[int, int, int]] = []  # (sequenceId, key, length)
        for k, m in enumerate(meta):
            if not isinstance(m, dict):
                raise InputError("expected an object", field=f"message_metadata[{k}]")
            try:
                seq = req_int(m, "sequenceId", nonneg=False)
                n = req_tokens(m, "token_len")
            except InputError as e:
                raise InputError(e.message, field=f"message_metadata[{k}].{e.field}") from None
            ident = repr((seq, m.get("type"), m.get("role"), n)).encode()
            segs.append((seq, int.from_bytes(hashlib.blake2b(ident, digest_size=8).digest(),
                                             "little", signed=True), n))
        segs.sort(key=lambda x: x[0])
        layout: list[tuple[int, int]] = []
        total = 0
        for _, seg_key, seg_len in segs:  # clip the layout to the recorded prompt length
            seg_len = min(seg_len, prompt - total)
            if seg_len <= 0:
                break
            layout.append((seg_key, seg_len))
            total += seg_len
        common = 0
        for mine, before in zip(layout, self.prev, strict=False):
            if mine != before:
                break
            common += mine[1]
        bs = self.bs
        keep = min(common // bs, len(self.full))
        full = self.full[:keep]
        n_full = total // bs
        last = full[-1] if full else 0
        # walk the segments block by block from the first block not reused
        pos = keep * bs
        seg_i, seg_start = 0, 0
        while seg_i < len(layout) and seg_start + layout[seg_i][1] <= pos:
            seg_start += layout[seg_i][1]
            seg_i += 1
        out: list[int] = []
        for blk in range(keep, n_full + (1 if total % bs else 0)):
            end = min((blk + 1) * bs, total)
            h = hashlib.blake2b(last.to_bytes(8, "little", signed=True), digest_size=8)
            while pos < end:
                seg_key, seg_len = layout[seg_i]
                take = min(end, seg_start + seg_len) - pos
                h.update(np.array([seg_key, pos - seg_start, take], dtype=np.int64).tobytes())
                pos += take
                if pos == seg_start + seg_len:
                    seg_start += seg_len
                    seg_i += 1
            last = int.from_bytes(h.digest(), "little") >> 1
            out.append(last)
        full.extend(out[:n_full - keep])
        self.prev = layout
        self.full = full
        return np.asarray(full + out[n_full - keep:], dtype=np.int64)
