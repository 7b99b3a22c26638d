"""Recorded OpenAI chat requests, as a recording proxy writes them: JSONL, one request per
line, ``{"timestamp": ..., "body": {"model", "messages", "tools"?, "max_tokens"?, ...},
"response"?: {...}}`` (``request`` for ``body``, or the body's keys at the top level, are
read too). ``timestamp`` is seconds (epoch or relative) or an ISO-8601 string; optional
``end_timestamp`` or ``duration_s`` give the response time.

Requests become sessions by an explicit key (a top-level ``session_id``, or the record or
body key named by option ``session_key``, e.g. ``"user"``), else by prefix: a request
whose messages extend (strictly) the messages of an earlier session's last request
continues that session. Text is tokenized (approximate, or ``tokenizer=``) and hashed as
in the sharegpt reader (chat template, prefix-chained blocks of ``block_size``). Output
tokens are the response's ``usage.completion_tokens``, else the tokens of its message,
else the body's ``max_completion_tokens`` / ``max_tokens``; the response's cached prompt
tokens (clipped to our prompt count) go to ``Turn.cached_tokens``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.readers import read_files
from agentbench.traces.readers._fields import check_block_size, opt_num, req_num, req_tokens
from agentbench.traces.readers._text import (
    DEFAULT_BLOCK_SIZE,
    OTHER_ROLE_ID,
    PromptHasher,
    content_text,
    iter_file_records,
    message_token_ids,
    primer_ids,
    reject_unknown,
)
from agentbench.traces.tokenizers import get_tokenizer


def read(source: str | Path, *, tokenizer: str | None = None,
         block_size: int = DEFAULT_BLOCK_SIZE, session_key: str | None = None,
         skip_bad: bool = False, **options: Any) -> Trace:
    """Read a request log (JSONL or a JSON array) or a folder of them; requests of several
    files may continue one session."""
    reject_unknown(options, "openai-log")
    check_block_size(block_size)
    tok = get_tokenizer(tokenizer)
    path = Path(source)

    def one(f: Path) -> list[_Req]:
        return _requests(((str(f), where, rec) for where, rec in iter_file_records(f)),
                         session_key, tok)

    per_file, skipped = read_files(path, (".jsonl", ".json"), one, skip_bad=skip_bad)
    trace = _assemble([r for rs in per_file for r in rs], tok, block_size, name=path.stem,
                      scope=str(path))
    trace.skipped = skipped
    return trace


def read_records(records: Iterable[dict[str, Any]], *, source: str, **options: Any) -> Trace:
    """Read decoded records (e.g. Hugging Face dataset rows)."""
    rows = [(source, f"record {i}", rec) for i, rec in enumerate(records)]
    return build(rows, name=Path(source).name or source, scope=source, **options)


class _Req:
    __slots__ = ("file", "where", "ts", "end", "role_texts", "tools", "model", "out",
                 "cached", "key")

    def __init__(self, file: str, where: str, rec: dict[str, Any], session_key: str | None,
                 tok: Any) -> None:
        self.file, self.where = file, where
        body = rec.get("body", rec.get("request", rec))
        if not isinstance(body, dict):
            raise InputError("expected an object", field="body")
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise InputError("missing, empty or not a list", field="messages")
        self.role_texts: list[tuple[str, str]] = []
        for j, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise InputError("missing or not a string", field=f"messages[{j}].role")
            try:
                text = content_text(m.get("content"))
            except InputError:
                raise InputError("expected a string or a list of parts",
                                 field=f"messages[{j}].content") from None
            if m.get("tool_calls"):
                text += json.dumps(m["tool_calls"], sort_keys=True)
            self.role_texts.append((m["role"], text))
        tools = body.get("tools")
        self.tools = json.dumps(tools, sort_keys=True) if tools else ""
        self.model = body.get("model") if isinstance(body.get("model"), str) else None
        self.ts = _time(rec.get("timestamp"), "timestamp")
        end = rec.get("end_timestamp")
        dur = opt_num(rec, "duration_s", nonneg=True)
        self.end = _time(end, "end_timestamp") if end is not None else (
            self.ts + dur if dur is not None else None)
        if self.end is not None and self.end < self.ts:
            raise InputError("before timestamp", field="end_timestamp")
        self.out, self.cached = _output(rec.get("response"), body, tok)
        key = rec.get("session_id")
        if key is None and session_key:
            key = rec.get(session_key, body.get(session_key))
        self.key = None if key is None else str(key)


def _time(val: Any, field: str) -> float:
    if isinstance(val, bool) or val is None:
        raise InputError("missing" if val is None else f"expected a time, got {val!r}",
                         field=field)
    if isinstance(val, int | float):
        return req_num({field: val}, field, nonneg=True)
    if isinstance(val, str):
        try:
            return datetime.fromisoformat(val.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError):  # also a time out of datetime's range
            raise InputError(f"not an ISO-8601 time: {val!r}", field=field) from None
    raise InputError(f"expected a time, got {val!r}", field=field)


def _output(resp: Any, body: dict[str, Any], tok: Any) -> tuple[int, int | None]:
    """(output tokens, recorded cached prompt tokens or None)."""
    cached: int | None = None
    if isinstance(resp, dict):
        usage: dict[str, Any] = resp["usage"] if isinstance(resp.get("usage"), dict) else {}
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            cached = max(0, details["cached_tokens"])
        ct = usage.get("completion_tokens")
        if isinstance(ct, int) and not isinstance(ct, bool):
            try:
                return req_tokens(usage, "completion_tokens"), cached
            except InputError as e:
                raise InputError(e.message, field="response.usage.completion_tokens") from None
        choices = resp.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            msg = choices[0].get("message") or {}
            text = content_text(msg.get("content")) if isinstance(msg, dict) else ""
            if isinstance(msg, dict) and msg.get("tool_calls"):
                text += json.dumps(msg["tool_calls"], sort_keys=True)
            return len(tok.encode(text)), cached
    for k in ("max_completion_tokens", "max_tokens"):
        v = body.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return req_tokens(body, k), cached
    raise InputError("no response usage, response message or max_tokens to size the output",
                     field="response")


def _digest(prev: bytes, role: str, text: str) -> bytes:
    h = hashlib.blake2b(prev, digest_size=16)
    h.update(role.encode())
    h.update(b"\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.digest()


def build(rows: Iterable[tuple[str, str, dict[str, Any]]], *, name: str, scope: str,
          tokenizer: str | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
          session_key: str | None = None, **options: Any) -> Trace:
    """Sessions from (file, where, record) triples."""
    reject_unknown(options, "openai-log")
    check_block_size(block_size)
    tok = get_tokenizer(tokenizer)
    return _assemble(_requests(rows, session_key, tok), tok, block_size, name=name,
                     scope=scope)


def _requests(rows: Iterable[tuple[str, str, dict[str, Any]]], session_key: str | None,
              tok: Any) -> list[_Req]:
    reqs: list[_Req] = []
    for file, where, rec in rows:
        try:
            reqs.append(_Req(file, where, rec, session_key, tok))
        except InputError as e:
            raise e.located(source=file, where=where) from None
    return reqs


def _assemble(reqs: list[_Req], tok: Any, block_size: int, *, name: str,
              scope: str) -> Trace:
    if not reqs:
        raise InputError("no requests", source=scope)
    reqs.sort(key=lambda r: r.ts)  # stable: equal times keep file order
    t0 = reqs[0].ts
    groups: list[list[_Req]] = []
    by_key: dict[str, list[_Req]] = {}
    tails: dict[bytes, list[_Req]] = {}  # digest of a session's last messages -> session
    for r in reqs:
        if r.key is not None:
            g = by_key.get(r.key)
            if g is None:
                g = by_key[r.key] = []
                groups.append(g)
            g.append(r)
            continue
        d = _digest(b"", "tools", r.tools)
        prefixes = []
        for role, text in r.role_texts:
            d = _digest(d, role, text)
            prefixes.append(d)
        g = None
        for k in range(len(prefixes) - 2, -1, -1):  # longest strict prefix first
            g = tails.pop(prefixes[k], None)
            if g is not None:
                break
        if g is None:
            g = []
            groups.append(g)
        g.append(r)
        tails[prefixes[-1]] = g
    encoded: dict[tuple[str, str], np.ndarray] = {}

    def enc(role: str, text: str) -> np.ndarray:
        ids = encoded.get((role, text))
        if ids is None:
            ids = encoded[(role, text)] = np.asarray(
                message_token_ids(tok.encode(text), role), dtype=np.int64)
        return ids

    primer = np.asarray(primer_ids(), dtype=np.int64)

    sessions = []
    stem = Path(name).stem or "log"
    for i, g in enumerate(groups):
        hasher = PromptHasher(block_size)
        turns: list[Turn] = []
        for k, r in enumerate(g):
            parts = [np.asarray([OTHER_ROLE_ID, *tok.encode(r.tools)], dtype=np.int64)
                     ] if r.tools else []
            parts.extend(enc(role, text) for role, text in r.role_texts)
            prompt = np.concatenate([*parts, primer])
            prev = g[k - 1] if k else None
            think = 0.0 if prev is None else max(0.0, r.ts - (
                prev.end if prev.end is not None else prev.ts))
            turn = Turn(
                turn=k, t=r.ts - g[0].ts, think_s=think,
                api_s=None if r.end is None else r.end - r.ts, input_tokens=len(prompt),
                output_tokens=r.out, hash_ids=hasher.hash_ids(prompt), block_size=block_size,
                cached_tokens=None if r.cached is None else min(r.cached, len(prompt)),
            )
            turns.append(turn)
        head = g[0]
        sid = head.key if head.key is not None else f"{stem}:{i}"
        sessions.append(Session(
            session_id=sid, parent_id=None, relation="root", parent_turn=None, join_turn=None,
            model=head.model, source=f"{head.file}#openai-log", scope=scope,
            start_s=head.ts - t0, turns=turns,
        ))
    trace = Trace(sessions, name=name)
    trace.validate()
    return trace
