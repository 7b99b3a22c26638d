"""Reading a finished OpenAI SSE stream from its raw chunks and their arrival times.

The HTTP loop only stores ``(arrival_ns, bytes)`` per chunk; this pure function, run after
the stream ended, finds the events, stamps each with the arrival of the chunk that
completed it, and tells which carry tokens. A token-bearing event is one whose delta
carries non-empty ``content``, ``reasoning_content`` / ``reasoning``, ``text``
(completions) or ``tool_calls`` (docs/metrics.md): found with a byte pattern (keys can only
appear unescaped as keys), so only the ``usage`` event is JSON-decoded in the common case.
An error event is ``data: {"error": {...}}`` (OpenAI) or vLLM's ErrorResponse as the data
(``data: {"object": "error", "message": ...}``), each the request's ``stream_error``.
Nothing after ``data: [DONE]`` is read: events a server sends after it are not the answer's
(docs/reliability.md).
"""

from __future__ import annotations

import bisect
import itertools
import json
import operator
import re
from collections.abc import Callable, MutableSequence, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import orjson

from agentbench.results.schema import USAGE_MAX
from agentbench.traces import words as tokenize
from agentbench.transport.sselines import lf_lines, without_bom

# "content":"x (non-empty string), "tool_calls":[ {  — JSON allows whitespace around ':'.
_TOKEN_RE = re.compile(
    rb'"(?:content|reasoning_content|reasoning|text)"\s*:\s*"(?!")|"tool_calls"\s*:\s*\[\s*\{')
_USAGE_RE = re.compile(rb'"usage"\s*:\s*\{')
#: an error event's data: ``{"error": ...}`` (OpenAI), or vLLM's ErrorResponse, whose first
#: key is ``"object": "error"`` (its model's field order, compact or ``json.dumps``-spaced)
_ERROR_RE = re.compile(rb'\{\s*(?:"error"\s*:|"object"\s*:\s*"error")')
_EVENT_SPLIT = re.compile(rb"\r?\n\r?\n")
#: a blank line, however lines end (CRLF, LF, CR): an SSE event's end
_SEPARATORS = (b"\n\n", b"\r\r", b"\n\r")


@dataclass(slots=True)
class StreamResult:
    """What a stream said: token-bearing event times and token counts, usage, errors."""

    # lists, or compact ``array.array``s (the in-process simulator's): the writer takes both
    token_event_ns: MutableSequence[int] = field(default_factory=list)
    token_event_tokens: MutableSequence[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    done: bool = False
    error_type: str | None = None
    error_message: str | None = None
    #: the arrival of the event that ended the stream (``data: [DONE]``; a typed stream's
    #: last event), None when none came; what follows it is not read
    end_ns: int | None = None


def event_start(reads: Sequence[bytes], scanned: int, end: int, start: int) -> int:
    """Where the SSE event in progress starts, as an offset into the reads joined (``end``
    bytes): just past the last blank line (lines ended by CRLF, LF or CR) in the reads from
    index ``scanned`` on, looked for from the newest back (one read before ``scanned`` too,
    for a blank line split between two reads); ``start`` when there is none. Each read is
    looked at once over a stream (chunk framing lies between an engine's events, never in
    a blank line it writes; one it did split only makes an event look longer)."""
    after = b""
    for i in range(len(reads) - 1, max(scanned - 2, -1), -1):
        r = reads[i]
        if r[-1:] + after[:1] in _SEPARATORS:
            return max(start, end + 1)
        k = max(r.rfind(b"\n\n"), r.rfind(b"\r\r"), r.rfind(b"\n\r"))
        if k >= 0:
            return max(start, end - len(r) + k + 2)
        end -= len(r)
        after = r
    return start


def parse_stream(chunks: Sequence[bytes], times: Sequence[int]) -> StreamResult:
    """Events of an SSE stream, each stamped with its completing chunk's arrival (ns).

    A leading byte order mark is dropped and lines may end with CRLF, LF or CR, as the SSE
    standard says (WHATWG HTML, server-sent events; docs/reliability.md). A well-formed
    stream (every event one ``data: {...}`` or ``data: [DONE]`` line) is read in a few
    passes over the joined bytes; anything else takes the event-by-event path, which also
    names what is malformed."""
    if chunks and (len(chunks[0]) < 3 or chunks[0][0] == 0xEF):  # a mark could be there
        chunks = without_bom(chunks)
    body = b"".join(chunks)
    if b"\r" in body:  # lines ended by CRLF or CR (rare): read as LF, then as any stream
        chunks = lf_lines(chunks)
        body = b"".join(chunks)
    fast = _parse_fast(chunks, times, body)
    return fast if fast is not None else _parse_events(chunks, times)


def _parse_fast(chunks: Sequence[bytes], times: Sequence[int], body: bytes
                ) -> StreamResult | None:
    """The stream read with C-level passes over ``body`` (the chunks joined, its lines
    ended by LF), or None when it is not the usual shape."""
    # an error event sends the stream to the event-by-event path, which reads it (every
    # object checked below starts 'data: {"', so this finds each; inside a JSON string the
    # quote is escaped)
    if b'data: {"error"' in body:
        return None
    # one event per chunk (an engine's writes, read one by one): the chunks are the events
    # as they are ("\n\n" kept) and event k is stamped with chunk k; else split the body
    # (two newlines a chunk, each chunk's last two: reads of several events go the other way)
    n, last, newlines = len(chunks), chunks[-1] if chunks else b"", body.count(b"\n")
    per_chunk = n > 1 and newlines == 2 * n \
        and all(map(bytes.endswith, chunks[:-1], repeat(b"}\n\n"))) \
        and (last == b"data: [DONE]\n\n" or last.endswith(b"}\n\n"))
    if per_chunk:
        evs, end = list(chunks), b"\n\n"
    else:
        evs, end = body.split(b"\n\n"), b""
        if evs.pop():  # bytes after the last separator: an unfinished event
            return None
    done = bool(evs) and evs[-1] == b"data: [DONE]" + end
    if not done and b"data: [DONE]" + end in evs:  # events after the end: not read
        return None
    objs = evs[:-1] if done else evs
    # every event one line 'data: {"...}', checked with C-level maps and searches (no
    # Python loop per event): a newline inside an event shows in the count; token events
    # start with their shared prefix, so only the others are looked at for 'data: {"' (an
    # object that starts otherwise, '{ "error"' say, takes the event-by-event path)
    if newlines != 2 * len(evs) \
            or not (per_chunk or all(map(bytes.endswith, objs, repeat(b"}")))):
        return None
    flags, others = _token_flags(evs, body)
    rest = objs if others is None else [evs[i] for i in others if i < len(objs)]
    if not all(map(bytes.startswith, rest, repeat(b'data: {"'))):
        return None
    # vLLM's error event (a token event, which starts with its prefix, is none)
    if any(map(_ERROR_RE.match, rest, repeat(6))):
        return None
    out = StreamResult(done=done, end_ns=times[-1] if done else None)
    if not done:
        out.error_type = "incomplete_stream"
        out.error_message = "stream ended without data: [DONE]"
    if n == 1:
        out.token_event_ns = [times[0]] * sum(flags)
    elif per_chunk:
        out.token_event_ns = list(itertools.compress(times, flags))
    else:
        chunk_ends = list(itertools.accumulate(map(len, chunks)))
        ev_ends = itertools.accumulate(len(ev) + 2 for ev in evs)
        out.token_event_ns = [times[bisect.bisect_left(chunk_ends, e)]
                              for e, f in zip(ev_ends, flags, strict=True) if f]
    # usage is in one of the last events; if not, the last one before (one body search)
    usage = next(filter(_USAGE_RE.search, reversed(evs[-4:])), None)
    if usage is None and len(evs) > 4 \
            and _USAGE_RE.search(body, 0, len(body) - sum(map(len, evs[-4:]))):
        usage = next(filter(_USAGE_RE.search, reversed(evs[:-4])), None)
    if usage is not None:
        _read_usage(usage, out)
    k = len(out.token_event_ns)
    if out.completion_tokens is None or not k < out.completion_tokens <= USAGE_MAX:
        out.token_event_tokens = [1] * k  # as _tokens_per_event, without the events' bytes
    else:
        out.token_event_tokens = _tokens_per_event(list(itertools.compress(evs, flags)),
                                                   out.completion_tokens)
    return out


def _token_flags(evs: list[bytes], body: bytes | None = None
                 ) -> tuple[list[bool], list[int] | None]:
    """Which events carry tokens (``_TOKEN_RE``), without a regex search per event: a
    server's token events share their bytes up to the token's text (id, model, created,
    the delta's key), so the first token event's bytes up to its text's opening quote are
    a prefix P, and an event that starts with P and not with P + '"' carries tokens (its
    match is at the same place). Events without P (role, finish, usage) are searched.
    ``body``: the events joined, where P + '"' is looked for at once (anywhere in it sends
    every event to the regex). Returns the flags and the indices of the events that do not
    start with P when P starts with 'data: {"' (None when every event was searched or P
    does not start so): every other event then starts with 'data: {"'."""
    found = list(map(_TOKEN_RE.search, evs[:4]))
    first = next((i for i, m in enumerate(found) if m), None)
    if first is None:
        return [_TOKEN_RE.search(ev) is not None for ev in evs], None
    m = found[first]
    assert m is not None
    prefix = evs[first][:m.end()]
    empty = prefix + b'"'
    if not prefix.endswith(b'"') or (empty in body if body is not None else
                                     any(map(bytes.startswith, evs, repeat(empty)))):
        return [_TOKEN_RE.search(ev) is not None for ev in evs], None
    flags = list(map(bytes.startswith, evs, repeat(prefix)))
    others = list(itertools.compress(range(len(evs)), map(operator.not_, flags)))
    for i in others:
        flags[i] = (found[i] if i < 4 else _TOKEN_RE.search(evs[i])) is not None
    return flags, others if prefix.startswith(b'data: {"') else None


def _parse_events(chunks: Sequence[bytes], times: Sequence[int]) -> StreamResult:
    out = StreamResult()
    pending = tail = b""
    more: list[bytes] = []  # chunks of an event in progress, joined once it ends
    token_texts: list[bytes] = []
    usage_event: bytes | None = None
    for chunk, t in zip(chunks, times, strict=True):
        # an event that goes on (no blank line from the last 3 bytes on): its chunks are
        # kept and joined once, not copied per chunk (a long event would cost its square)
        if pending and _EVENT_SPLIT.search(tail + chunk) is None:
            more.append(chunk)
            tail = (tail + chunk)[-3:]
            continue
        if more:
            pending, more = b"".join([pending, *more]), []
        data = pending + chunk if pending else chunk
        parts = _EVENT_SPLIT.split(data)
        pending = parts.pop()
        tail = pending[-3:]
        for ev in parts:
            if not ev:
                continue
            kind = _event(ev, out)
            if kind == 1:
                out.token_event_ns.append(t)
                token_texts.append(ev)
            if kind and _USAGE_RE.search(ev):
                usage_event = ev
            if out.error_type:  # the events before it are kept, with their token counts
                out.token_event_tokens = _tokens_per_event(token_texts, None)
                if out.error_type == "stream_error":  # the server's last word: the end
                    out.end_ns = t
                return out
            if out.done:  # [DONE]: what a server sends after it is not the answer's
                out.end_ns = t
                pending, more = b"", []
                break
        if out.done:
            break
    if more:
        pending = b"".join([pending, *more])
    if pending.strip():
        kind = _event(pending.strip(), out)
        if kind == 1 and times:
            out.token_event_ns.append(times[-1])
            token_texts.append(pending)
        if kind and _USAGE_RE.search(pending):
            usage_event = pending
        if (out.done or out.error_type == "stream_error") and times:
            out.end_ns = times[-1]
    if usage_event is not None and out.error_type is None:
        _read_usage(usage_event, out)
    if out.error_type is None and not out.done:
        out.error_type = "incomplete_stream"
        out.error_message = "stream ended without data: [DONE]"
    out.token_event_tokens = _tokens_per_event(token_texts, out.completion_tokens)
    return out


def _event(ev: bytes, out: StreamResult) -> int:
    """0: no tokens (comment, role-only, usage, [DONE]); 1: token-bearing; sets errors."""
    data = b""
    for line in ev.splitlines():
        if line.startswith(b"data:"):
            data += line[5:].strip()
        elif line and not line.startswith((b":", b"event:", b"id:", b"retry:")):
            out.error_type = "malformed_sse"
            out.error_message = f"not an SSE line: {line[:80]!r}"
            return 0
    if not data:
        return 0
    if data == b"[DONE]":
        out.done = True
        return 0
    if not (data.startswith(b"{") and data.endswith(b"}")):
        out.error_type = "malformed_sse"
        out.error_message = f"event data is not a JSON object: {data[:80]!r}"
        return 0
    if data.startswith(b'{"error"') or _ERROR_RE.match(data):
        out.error_type = "stream_error"
        out.error_message = data[:500].decode("utf-8", "replace")
        return 0
    return 1 if _TOKEN_RE.search(data) else 2


def _read_usage(ev: bytes, out: StreamResult) -> None:
    data = b"".join(line[5:].strip() for line in ev.splitlines() if line.startswith(b"data:"))
    try:  # orjson first (a few times faster): an integer it reads as a float past 64 bits
        obj = orjson.loads(data)  # is one read_count bounds as it does the integer
    except orjson.JSONDecodeError:
        try:
            obj = loads(data)
        except ValueError as e:
            out.error_type = "malformed_sse"
            out.error_message = f"usage event is not valid JSON: {e}"
            return
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(usage, dict):
        return
    out.prompt_tokens = read_count(usage.get("prompt_tokens"))
    out.completion_tokens = read_count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        out.cached_tokens = read_count(details.get("cached_tokens"))
    if out.cached_tokens is None and "cached_tokens" in usage:  # some servers, flat
        out.cached_tokens = read_count(usage.get("cached_tokens"))


def read_count(v: object) -> int | None:
    """A count from ``usage``: an integer (or an integral float) within +-USAGE_MAX, one
    past it beyond (``2**70`` is kept as ``USAGE_MAX + 1``); None for anything else (bool,
    NaN, infinity, 2.5, a string), which is then treated as missing."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int):
        return max(-USAGE_MAX - 1, min(v, USAGE_MAX + 1))
    return None


def _tokens_per_event(events: list[bytes], completion_tokens: int | None) -> list[int]:
    """Tokens each event carried (:func:`spread_counts`, estimated from the events' text)."""
    return spread_counts(len(events), completion_tokens,
                         lambda: [max(1, _event_text_tokens(ev)) for ev in events])


def spread_counts(n: int, completion_tokens: int | None,
                  estimate: Callable[[], list[int]]) -> list[int]:
    """Tokens each of ``n`` token events carried: 1 each when that matches ``usage`` (the
    usual case); otherwise the events' own estimates (``estimate()``, each at least 1,
    from their text with the approximate tokenizer), scaled so the counts sum to
    ``usage.completion_tokens``."""
    if n == 0:
        return []
    if completion_tokens is None or completion_tokens == n or completion_tokens > USAGE_MAX:
        return [1] * n
    if completion_tokens <= n:
        return [1] * n
    est = estimate()
    total = sum(est)
    scaled = [e * completion_tokens / total for e in est]
    counts = [max(1, int(s)) for s in scaled]
    short = completion_tokens - sum(counts)
    order = sorted(range(n), key=lambda i: scaled[i] - int(scaled[i]), reverse=True)
    if short > 0:  # the largest remainders first, in whole rounds (a huge count is no loop)
        rounds, extra = divmod(short, n)
        for i, j in enumerate(order):
            counts[j] += rounds + (i < extra)
    if short < -n:  # float rounding of an absurd count: take back from the largest at once
        for j in sorted(range(n), key=counts.__getitem__, reverse=True):
            take = min(counts[j] - 1, -short)
            counts[j] -= take
            short += take
    while short < 0:  # rounding up to 1 overshot: take back from the largest
        j = max(range(n), key=lambda k: counts[k])
        if counts[j] <= 1:
            break
        counts[j] -= 1
        short += 1
    return counts


def _event_text_tokens(ev: bytes) -> int:
    data = b"".join(line[5:].strip() for line in ev.splitlines() if line.startswith(b"data:"))
    try:
        obj = loads(data)
    except ValueError:
        return 1
    texts: list[str] = []
    # any JSON may stand where an object or a list belongs: only the expected shapes count
    for ch in _list(obj.get("choices") if isinstance(obj, dict) else None):
        if not isinstance(ch, dict):
            continue
        if isinstance(ch.get("text"), str):
            texts.append(ch["text"])
        delta = ch.get("delta")
        if not isinstance(delta, dict):
            continue
        for k in ("content", "reasoning_content", "reasoning"):
            if isinstance(delta.get(k), str):
                texts.append(delta[k])
        for call in _list(delta.get("tool_calls")):
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                texts.append(str(fn.get("arguments") or "") + str(fn.get("name") or ""))
    return tokenize.count_tokens("".join(texts))


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def loads(data: bytes | str) -> Any:
    """``json.loads``, with JSON nested past Python's recursion limit (which raises
    RecursionError, not a ValueError) one more ValueError: what a server sends is read
    or refused, never raised out of the reader."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
