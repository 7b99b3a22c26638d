"""Reading a finished Responses or Messages stream (typed SSE events) from its raw chunks
and their arrival times, into the same :class:`~agentbench.transport.sse.StreamResult` a
chat stream gives (docs/architecture.md#apis).

Both APIs name each event by a ``type`` field (and an ``event:`` line):

- **Responses** (``POST /v1/responses``): tokens come in ``response.output_text.delta``,
  ``response.reasoning_text.delta``, ``response.reasoning_summary_text.delta``,
  ``response.refusal.delta``, ``response.function_call_arguments.delta`` and
  ``response.custom_tool_call_input.delta`` (a non-empty ``delta``); the stream ends with
  ``response.completed`` or ``response.incomplete`` (the output limit reached, as a chat
  stream's ``finish_reason: length``), whose ``response.usage`` has ``input_tokens``,
  ``input_tokens_details.cached_tokens`` and ``output_tokens``. ``error`` and
  ``response.failed`` fail the request.
- **Messages** (``POST /v1/messages``): tokens come in ``content_block_delta`` events whose
  ``delta`` is a ``text_delta`` (``text``), ``thinking_delta`` (``thinking``) or
  ``input_json_delta`` (``partial_json``, a tool call's input), non-empty; ``message_start``
  carries the prompt's usage and ``message_delta`` the final ``output_tokens`` (and, from
  some servers, the prompt's counts again: the later ones are kept); ``message_stop`` ends
  the stream; ``error`` fails it. The prompt is ``input_tokens + cache_read_input_tokens +
  cache_creation_input_tokens`` (Anthropic counts cache reads and writes apart from
  ``input_tokens``) and the cached tokens are ``cache_read_input_tokens``.

Every event's JSON is decoded (these APIs carry the kind of an event only there); events are
split at blank lines however lines end (CRLF, LF, CR), and a byte order mark that starts the
stream is dropped, as the SSE standard says. Nothing after the last event
(``response.completed``, ``.incomplete`` or ``.failed``; ``message_stop``) is read: events a
server sends after it are not the answer's (docs/reliability.md).
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from typing import Any

from agentbench.traces import words as tokenize
from agentbench.transport.sse import StreamResult, loads, read_count, spread_counts
from agentbench.transport.sselines import without_bom

#: a blank line: two line ends, ``\r\n`` always read as one (atomic groups)
_BLANK = re.compile(rb"(?>\r\n|\n|\r)(?>\r\n|\n|\r)")
_LINE = re.compile(rb"\r\n|\n|\r")

#: Responses event types whose non-empty ``delta`` carries output tokens
RESPONSES_TOKEN_TYPES = frozenset({
    "response.output_text.delta", "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta", "response.refusal.delta",
    "response.function_call_arguments.delta", "response.custom_tool_call_input.delta"})
#: Messages ``content_block_delta`` kinds that carry output tokens, and their text field
MESSAGES_TOKEN_DELTAS = {"text_delta": "text", "thinking_delta": "thinking",
                         "input_json_delta": "partial_json"}
#: the event that ends a stream well, per API
END_EVENTS = {"responses": ("response.completed", "response.incomplete"),
              "messages": ("message_stop",)}


def split_events(chunks: Sequence[bytes], times: Sequence[int]
                 ) -> tuple[list[tuple[bytes, int]], bytes]:
    """The events of a stream, each with the arrival of the chunk that completed it, and
    the bytes after the last blank line (an event not finished)."""
    body = b"".join(chunks)
    ends = list(itertools.accumulate(map(len, chunks)))
    out: list[tuple[bytes, int]] = []
    start = 0
    for m in _BLANK.finditer(body):
        ev = body[start:m.start()]
        start = m.end()
        if ev:
            i = min(bisect.bisect_left(ends, m.end()), len(times) - 1)
            out.append((ev, times[i]))
    return out, body[start:]


def _fields(ev: bytes, out: StreamResult) -> tuple[str, bytes] | None:
    """(event name, data) of one event; None for a comment-only event or a malformed one
    (which sets ``out.error_type``)."""
    name, data = "", []
    for line in _LINE.split(ev):
        if line.startswith(b"data:"):
            v = line[5:]
            data.append(v[1:] if v.startswith(b" ") else v)
        elif line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
        elif line and not line.startswith((b":", b"id:", b"retry:")):
            out.error_type = "malformed_sse"
            out.error_message = f"not an SSE line: {line[:80]!r}"
            return None
    if not data:
        return None
    return name, b"\n".join(data)


def _message(obj: dict[str, Any], data: bytes) -> str:
    """The error message of an ``error`` or ``response.failed`` event (its JSON when it has
    none)."""
    for where in (obj.get("error"), (obj.get("response") or {}).get("error")
                  if isinstance(obj.get("response"), dict) else None, obj):
        if isinstance(where, dict) and isinstance(where.get("message"), str):
            # an event's own type is "error": its code says more (server_error, ...)
            kind = where.get("code") if where is obj else (where.get("type")
                                                           or where.get("code"))
            return f"{kind}: {where['message']}"[:500] if isinstance(kind, str) else \
                where["message"][:500]
    return data[:500].decode("utf-8", "replace")


def parse_typed(chunks: Sequence[bytes], times: Sequence[int], api: str) -> StreamResult:
    """What a Responses (``api="responses"``) or Messages (``"messages"``) stream said."""
    out = StreamResult()
    events, rest = split_events(without_bom(chunks), times)
    if rest.strip() and times:
        events.append((rest.strip(), times[-1]))
    token_texts: list[str] = []
    usage: dict[str, Any] = {}
    ends = END_EVENTS[api]
    for ev, t in events:
        got = _fields(ev, out)
        if out.error_type:
            break
        if got is None:
            continue
        name, data = got
        if data.strip() == b"[DONE]":  # some gateways end with it as chat does: not an event
            continue
        try:
            obj = loads(data)
        except ValueError:
            out.error_type = "malformed_sse"
            out.error_message = f"event data is not valid JSON: {data[:80]!r}"
            break
        if not isinstance(obj, dict):
            out.error_type = "malformed_sse"
            out.error_message = f"event data is not a JSON object: {data[:80]!r}"
            break
        typ = obj.get("type")
        kind = typ if isinstance(typ, str) else name
        if kind in ("error", "response.failed"):
            out.error_type = "stream_error"
            out.error_message = _message(obj, data)
            out.end_ns = t  # the stream's last event, as a failure
            break
        text = _token_text(api, kind, obj)
        if text:
            out.token_event_ns.append(t)
            token_texts.append(text)
        _take_usage(api, kind, obj, usage)
        if kind in ends:  # the stream's last event: what a server sends after it is not read
            out.done = True
            out.end_ns = t
            break
    if out.error_type is None:
        _counts(api, usage, out)
        if not out.done:
            out.error_type = "incomplete_stream"
            out.error_message = f"stream ended without {' or '.join(ends)}"
    out.token_event_tokens = spread_counts(
        len(token_texts), out.completion_tokens,
        lambda: [max(1, tokenize.count_tokens(s)) for s in token_texts])
    return out


def _token_text(api: str, kind: str, obj: dict[str, Any]) -> str:
    """The text an event carried when it carries output tokens, else ''."""
    if api == "responses":
        d = obj.get("delta")
        return d if kind in RESPONSES_TOKEN_TYPES and isinstance(d, str) else ""
    if kind != "content_block_delta" or not isinstance(obj.get("delta"), dict):
        return ""
    delta = obj["delta"]
    kind = delta.get("type")
    key = MESSAGES_TOKEN_DELTAS.get(kind) if isinstance(kind, str) else None
    v = delta.get(key) if key else None
    return v if isinstance(v, str) else ""


def _take_usage(api: str, kind: str, obj: dict[str, Any], usage: dict[str, Any]) -> None:
    if api == "responses":
        r = obj.get("response")
        if kind in END_EVENTS["responses"] and isinstance(r, dict) \
                and isinstance(r.get("usage"), dict):
            usage.update(r["usage"])
        return
    if kind == "message_start" and isinstance(obj.get("message"), dict):
        u = obj["message"].get("usage")
        if isinstance(u, dict):  # its output_tokens is a placeholder (1), not the count
            u = {k: v for k, v in u.items() if k != "output_tokens"}
    elif kind == "message_delta":
        u = obj.get("usage")
    else:
        return
    if isinstance(u, dict):  # a later count replaces an earlier one; a non-count does not
        usage.update({k: v for k, v in u.items() if read_count(v) is not None})


def _counts(api: str, usage: dict[str, Any], out: StreamResult) -> None:
    """Prompt, output and cached tokens from the usage the stream gave (None when not)."""
    if not usage:
        return
    prompt, cached, output = usage_counts(api, usage)
    out.prompt_tokens, out.cached_tokens, out.completion_tokens = prompt, cached, output


def usage_counts(api: str, usage: dict[str, Any]
                 ) -> tuple[int | None, int | None, int | None]:
    """(prompt, cached, output) tokens of a Responses or Messages ``usage`` object, each
    None when not given (or not a count)."""
    output = read_count(usage.get("output_tokens"))
    inp = read_count(usage.get("input_tokens"))
    if api == "responses":
        details = usage.get("input_tokens_details")
        cached = read_count(details.get("cached_tokens")) if isinstance(details, dict) \
            else None
        return inp, cached, output
    read = read_count(usage.get("cache_read_input_tokens"))
    made = read_count(usage.get("cache_creation_input_tokens"))
    prompt = None if inp is None else inp + (read or 0) + (made or 0)
    return read_count(prompt), read, output
