"""A recording on disk: a journal appended call by call, and the native trace built from it.

``<out>.calls.jsonl`` gets one line per finished call (flushed at once: a crash, Ctrl-C or
SIGKILL keeps every finished call). ``<out>`` is the native trace
(:mod:`agentbench.traces.readers.native`), rewritten from the journal's calls as the
recording goes and at its end, each time whole and then renamed into place, so the file
on disk is always a readable trace. ``rebuild`` makes it again from a journal. A call
that cannot be a turn is left out and counted, never the whole file (``problem``).

Beside the native columns the turns table carries per-call columns (``call_index``,
``path``, ``stream``, ``ttft_s`` = first response byte - arrival, ``usage_reported``,
``counted_input_tokens``; ``request_text`` and ``response_text`` only with keep_text),
and the file's metadata key ``agentbench.recording`` says, as JSON, what was and was not
stored.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from agentbench import __version__
from agentbench.errors import InputError
from agentbench.proxy.calls import Call
from agentbench.proxy.sessionize import NS, sessionize
from agentbench.traces.model import Trace, Turn, as_hash_ids
from agentbench.traces.readers import native

RECORDING_KEY = b"agentbench.recording"
FORMAT = "agentbench-record/1"

STORED = [
    "per call: arrival and end time (s, one monotonic clock), time to the first response "
    "byte, model, API path, stream flag",
    "input, output and cached token counts (the server's usage; counted with the tokenizer "
    "when the server sent none: usage_reported = false)",
    "block hash ids of the prompt (content hashes of token blocks, not reversible to text)",
    "sessions, subagents (fork/spawn, parent_turn, join_turn) and think times",
    "Anthropic cache_control breakpoints, as the prompt tokens before each",
]
NOT_STORED = [
    "request headers (Authorization, API keys, cookies and every other header are "
    "forwarded, never written; the session header's value is the session id)",
    "the upstream URL's user:password part and query values (stored as <redacted>)",
    "response bodies",
]


def journal_path(out: Path) -> Path:
    return out.with_name(out.name + ".calls.jsonl")


class Journal:
    """Appends calls, one JSON line each, flushed as written; the first line is the
    recording's metadata (``{"recording": {...}}``). A write the disk refuses (full, a
    quota) ends the journal there: ``failed`` holds why, ``calls`` counts the calls before
    it, and a line it cut short stays its last, which ``read_journal`` leaves out."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.failed: OSError | None = None
        self.calls = 0  # calls whole in the journal
        self._f: IO[str] = path.open("x", encoding="utf-8")
        self._f.write(json.dumps({"recording": meta}) + "\n")
        self._f.flush()

    def append(self, call: Call) -> None:
        if self.failed is not None:
            return
        try:
            self._f.write(json.dumps(call.to_json(), separators=(",", ":")) + "\n")
            self._f.flush()
        except OSError as e:
            self.failed = e
            return
        self.calls += 1

    def close(self) -> None:
        try:
            self._f.close()  # after a failed write, its flush fails again: nothing to add
        except OSError as e:
            self.failed = self.failed or e


#: the text fields of a call, which go into the trace's string columns
_TEXTS = ("path", "model", "session_key", "parent_key", "error", "request_text",
          "response_text", "stream_error")


def text_safe(call: Call) -> Call:
    """``call`` with every lone surrogate in its text written as its escape (``\\udc00``):
    JSON may hold one (``"user": "\\udc00"``), an invalid UTF-8 header byte becomes one,
    and no parquet string column takes it (one such call lost the whole trace). The
    escape keeps two keys that differ apart."""
    for name in _TEXTS:
        v = getattr(call, name)
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                setattr(call, name, v.encode("utf-8", "backslashreplace").decode("utf-8"))
    return call


def read_journal(path: Path) -> tuple[dict[str, Any], list[Call]]:
    """(metadata, calls) of a journal. A torn last line (killed mid-write) is left out;
    any other line that is not a call is skipped, named on stderr and counted in the
    metadata (``unreadable_lines``). A file whose first line is no ``{"recording": ...}``
    header (which ``Journal`` writes before any call) is no journal: refused, so that
    ``--rebuild`` never replaces a trace with an empty one over a line of stderr each."""
    meta: dict[str, Any] = {}
    out = []
    bad = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            if i == 0 and isinstance(doc, dict) and isinstance(doc.get("recording"), dict):
                meta = doc["recording"]
                continue
            if i == 0:
                raise TypeError("no recording header")
            if not isinstance(doc, dict):
                raise TypeError("not a JSON object")
            out.append(text_safe(Call.from_json(doc)))
        except (ValueError, TypeError) as e:
            if i >= len(lines) - 2:  # the last line, torn by a kill
                break
            if i == 0:
                raise InputError('not a recording journal (its first line is no {"recording": '
                                 '...} header); nothing written', source=str(path)) from None
            bad += 1
            print(f"{path}: line {i + 1}: unreadable call skipped ({e})", file=sys.stderr)
    if bad:
        meta = {**meta, "unreadable_lines": bad}
    return meta, out


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int64(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1]


def problem(call: Call) -> str | None:
    """Why ``call`` cannot be a turn of a trace (a field of the wrong type, a number out of
    range, a count no request can have), or None. Such a call is left out of the trace
    and counted (``calls_left_out.invalid``); the others are written as usual."""
    for name in ("index", "status", "arrival_ns", "end_ns", "counted_input_tokens",
                 "block_size", "reply"):
        if not _int64(getattr(call, name)):
            return f"{name} is not a 64-bit integer"
    if call.first_byte_ns is not None and not _int64(call.first_byte_ns):
        return "first_byte_ns is not a 64-bit integer"
    if not isinstance(call.path, str):
        return "path is not a string"
    for name in ("model", "session_key", "parent_key", "error", "request_text",
                 "response_text", "stream_error"):
        if getattr(call, name) is not None and not isinstance(getattr(call, name), str):
            return f"{name} is not a string"
    for name in ("hash_ids", "prefixes"):
        v = getattr(call, name)
        if not isinstance(v, list) or not all(map(_int64, v)):
            return f"{name} is not a list of 64-bit integers"
    marks = call.cache_breakpoints
    if marks is not None and (not isinstance(marks, list) or not all(map(_int64, marks))):
        return "cache_breakpoints is not a list of 64-bit integers"
    if call.cached_tokens is not None and not _int64(call.cached_tokens):
        return "cached_tokens is not a 64-bit integer"
    for name in ("input_tokens", "output_tokens"):
        if not _int64(getattr(call, name)):
            return f"{name} is not a 64-bit integer"
    turn = Turn(turn=0, t=0.0, think_s=0.0, api_s=0.0, input_tokens=call.input_tokens,
                output_tokens=call.output_tokens, hash_ids=as_hash_ids(call.hash_ids),
                block_size=call.block_size, cached_tokens=call.cached_tokens)
    try:
        turn.validate()
    except InputError as e:
        return str(e)
    return None


def describe(*, upstream: str, keep_text: bool, block_size: int, tokenizer: str | None,
             subagents: str, session_header: str, session_from_user: bool,
             started_unix_s: float) -> dict[str, Any]:
    """The ``agentbench.recording`` metadata: what this file holds and how it was made."""
    stored = list(STORED)
    not_stored = list(NOT_STORED)
    if keep_text:
        stored.append("prompt text (request messages, prompt, tools) and response text "
                      "(--keep-text)")
    else:
        not_stored.insert(0, "prompt and response text (--keep-text stores them)")
    return {
        "format": FORMAT, "recorder": f"agentbench record {__version__}",
        "upstream": upstream, "started_unix_s": started_unix_s,
        "started_note": "wall clock, for humans; times in the trace are monotonic",
        "keep_text": keep_text, "block_size": block_size,
        "tokenizer": tokenizer or "agentbench.traces.words (approximate)",
        "prompt_layout": "tools, then <role> content+tool_calls <end> per message, then "
                         "<assistant>; prefix-chained blake2b block hashes (openai-log "
                         "reader's layout); Responses items and Messages blocks as "
                         "messages (docs/record.md)",
        "sessions_from": ([f"header {session_header}"] + (["body user"] if session_from_user
                                                          else [])
                          + ["prompt + response continuity", "prompt prefix continuity"]),
        "subagents": subagents, "stored": stored, "not_stored": not_stored,
    }


def write(calls: Sequence[Call], out: Path, meta: dict[str, Any]) -> Trace:
    """Sessionize ``calls`` and write the native trace at ``out``: whole, in a folder of
    its own beside ``out`` (made with a random name, readable by this user alone, so
    nothing planted there is followed), then renamed into place. A call that cannot be a
    turn (``problem``) is left out and counted."""
    good = [c for c in calls if problem(c) is None]
    trace, rows = sessionize(good, subagents=str(meta.get("subagents", "infer")),
                             name=out.stem, source=str(out))
    ttft = [None if c.first_byte_ns is None else (c.first_byte_ns - c.arrival_ns) / NS
            for c in rows]
    extra: dict[str, pa.Array] = {
        "call_index": pa.array([c.index for c in rows], pa.int64()),
        "path": pa.array([c.path for c in rows], pa.string()),
        "stream": pa.array([c.stream for c in rows], pa.bool_()),
        "ttft_s": pa.array(ttft, pa.float64()),
        "usage_reported": pa.array([c.usage_reported for c in rows], pa.bool_()),
        "counted_input_tokens": pa.array([c.counted_input_tokens for c in rows], pa.int64()),
        # Anthropic cache_control breakpoints, as prompt tokens before each (null: none)
        "cache_breakpoints": pa.array([c.cache_breakpoints for c in rows],
                                      pa.list_(pa.int64())),
    }
    if meta.get("keep_text"):
        extra["request_text"] = pa.array([c.request_text for c in rows], pa.large_string())
        extra["response_text"] = pa.array([c.response_text for c in rows], pa.large_string())
    info = dict(meta)
    info["calls"] = len(calls)
    info["calls_in_trace"] = len(rows)
    left_out = {"http_error": sum(1 for c in good if not 200 <= c.status < 300)}
    if (failed := sum(1 for c in good if 200 <= c.status < 300 and not c.ok)):
        left_out["stream_error"] = failed  # a 2xx whose stream then failed
    if len(good) < len(calls):
        left_out["invalid"] = len(calls) - len(good)
    if meta.get("unreadable_lines"):
        left_out["unreadable"] = int(meta["unreadable_lines"])
    info["calls_left_out"] = left_out
    chained = sum(1 for c in good if c.error and "previous_response_id" in c.error)
    if chained:  # Responses calls that sent only their new items (docs/record.md)
        info["calls_chained_by_previous_response_id"] = chained
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as folder:
        tmp = Path(folder) / "trace.parquet"
        # the native writer lays the turns out (its rows: sessions in order, then turns);
        # the recording's columns and metadata go beside them, which its reader ignores
        native.write(trace, tmp)
        turns = pq.read_table(tmp)
        for name, col in extra.items():
            turns = turns.append_column(name, col)
        turns = turns.replace_schema_metadata({**(turns.schema.metadata or {}),
                                               RECORDING_KEY: json.dumps(info).encode()})
        pq.write_table(turns, tmp, compression="zstd",
                       row_group_size=getattr(native, "BATCH_TURNS", None))
        os.replace(tmp, out)
    return trace


def read_meta(path: Path) -> dict[str, Any]:
    """The ``agentbench.recording`` metadata of a recorded trace."""
    meta = pq.read_schema(path).metadata or {}
    if RECORDING_KEY not in meta:
        raise InputError("not a recording (no agentbench.recording metadata)", source=str(path))
    info: dict[str, Any] = json.loads(meta[RECORDING_KEY])
    return info


def rebuild(out: Path) -> Trace:
    """Write ``out`` again from its journal (after a kill, or to re-sessionize)."""
    j = journal_path(out)
    if not j.exists():
        raise InputError("no journal to rebuild from", source=str(j))
    if not j.is_file():  # a FIFO was waited on forever, /dev/zero read until memory ran out
        raise InputError("not a regular file (record writes its journal as one)",
                         source=str(j))
    meta, calls = read_journal(j)
    return write(calls, out, meta)
