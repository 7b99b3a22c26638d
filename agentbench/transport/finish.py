"""A finished request's record into its requests.parquet row: the raw stream read into
token events, tokens and ``usage`` (docs/architecture.md#measurements). The transport
that stamped the record knows how to read it: HTTP leaves the body's chunks, the
in-process simulator what the stream said (``RequestRecord.result``)."""

from __future__ import annotations

from typing import Any

from agentbench.results import schema as records
from agentbench.results.schema import RequestRecord
from agentbench.transport.apis import read_stream
from agentbench.transport.http import redact
from agentbench.transport.sse import StreamResult


def finish_record(rec: RequestRecord) -> dict[str, Any]:
    """The requests.parquet row of a finished request: the raw stream read into events,
    tokens and usage (docs/architecture.md#measurements). Frees the raw chunks."""
    row: dict[str, Any] = {
        "request_id": rec.request_id, "stage": rec.stage, "phase": rec.phase,
        "endpoint": rec.endpoint, "lane": rec.lane, "tree_id": rec.tree_id,
        "session_id": rec.session_id, "relation": rec.relation, "copy": rec.copy,
        "turn": rec.turn, "scheduled_ns": rec.scheduled_ns, "sent_ns": rec.sent_ns,
        "first_token_ns": None, "last_token_ns": None, "end_ns": rec.end_ns,
        "token_events": None, "token_event_ns": None, "token_event_tokens": None,
        "prompt_tokens": None, "completion_tokens": None, "cached_tokens": None,
        "expected_input_tokens": rec.expected_input_tokens,
        "expected_output_tokens": rec.expected_output_tokens,
        "potential_cached_tokens": rec.potential_cached_tokens,
        "status": rec.status, "http_status": rec.http_status,
        "error_type": rec.error_type, "error_message": rec.error_message,
    }
    if rec.http_status == 200 and (rec.chunks or rec.result is not None
                                   or rec.status == records.OK):
        st = rec.result if rec.result is not None else _read(rec)
        ev = st.token_event_ns
        row["token_events"] = len(ev)
        row["token_event_ns"] = ev
        row["token_event_tokens"] = st.token_event_tokens
        if ev:
            row["first_token_ns"] = ev[0]
            row["last_token_ns"] = ev[-1]
        row["prompt_tokens"] = st.prompt_tokens
        row["completion_tokens"] = st.completion_tokens
        row["cached_tokens"] = st.cached_tokens
        if rec.status == records.OK and st.error_type is not None:
            row["status"] = records.ERROR
            row["error_type"] = st.error_type
            # an error event may echo the request's key or headers: redacted as HTTP
            # error bodies are
            row["error_message"] = _said(st, rec)
        elif rec.status == records.ERROR and st.error_type == "stream_error" \
                and rec.error_type in CUT_AFTER:
            # the server said why in an error event, then neither ended the body nor
            # closed: its error is the request's, the cut that followed said with it
            row["error_type"] = st.error_type
            row["error_message"] = f"{_said(st, rec)} (then {rec.error_type}: " \
                                   f"{rec.error_message})"
    msg = row["error_message"]
    if isinstance(msg, str) and not msg.isascii():
        # a JSON error event may hold a lone surrogate ("\\ud800"), which no UTF-8 file
        # can: replaced, or the journal and the table would refuse the row
        row["error_message"] = msg.encode("utf-8", "replace").decode("utf-8")
    parts = rec.breakdown_ns if row["status"] == records.OK else None
    for i, name in enumerate(records.BREAKDOWN):
        row[name] = parts[i] if parts is not None else None
    rec.chunks = []
    rec.chunk_ns = []
    rec.result = None
    return row


#: how a stream can end after an error event that did not end it (the transport's errors)
CUT_AFTER = frozenset({"stall_timeout", "timeout", "disconnected"})


def _said(st: StreamResult, rec: RequestRecord) -> str | None:
    """An error event's message, redacted as HTTP error bodies are (it may echo the
    request's key or headers)."""
    return redact(st.error_message, rec.secrets, cut=True) \
        if st.error_message and rec.secrets else st.error_message


def _read(rec: RequestRecord) -> StreamResult:
    """What the stream said; a stream its reader cannot read (a shape no check foresaw) is
    this request's ``malformed_sse`` error, never an exception that ends the run."""
    try:
        return read_stream(rec.api, rec.chunks, rec.chunk_ns)
    except Exception as e:
        return StreamResult(error_type="malformed_sse",
                            error_message=f"the stream could not be read: {type(e).__name__}:"
                                          f" {str(e)[:200]}")
