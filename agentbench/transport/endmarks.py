"""Where the bytes of a stream's last event (``agentbench.transport.apis.END_MARKS``:
``[DONE]``, ``response.completed``, ``message_stop``, ...) end in the raw reads that one
look of a request's timer covers (``agentbench.transport.streamtimer``, every
``END_GRACE_S``), however the reads and the HTTP chunks cut them (docs/reliability.md):

- whole, or cut between two reads: the look searches the previous look's last ``TAIL``
  bytes with its own;
- cut by the framing of HTTP chunks (a server that sent ``data: [DO``, then ``NE]``, as
  two chunks, or ``[D``, ``ON``, ``E]`` as three): the framing lies between the marker's
  pieces in the raw bytes, so a pattern of framing then a marker's end is searched in the
  last ``CUT_WINDOW`` bytes, and where it is found, the bytes before it, read without
  their own framing, must end with the marker's start;
- in an event that came in part (a Responses event's ``event:`` line, its JSON still to
  come): the stream read as it stands ends in that event, and the stream's reader looks
  again at the next read (``in_unfinished_event``).

Nothing here runs per socket read, and what finds the marker only leads the stream to be
read: a token's text that holds the same bytes ends nothing."""

from __future__ import annotations

import re

from agentbench.transport import apis
from agentbench.transport.sse import event_start

#: bytes of one look kept for the next: a marker cut between two reads, or with the
#: framing of two HTTP chunks between its halves, is found whole
TAIL = max(len(m) for marks in apis.END_MARKS.values() for m in marks) - 1 + 100
#: the framing between two HTTP chunks: CRLF, the size in hex, any extension, CRLF
_FRAMING = rb"\r\n[0-9A-Fa-f]{1,16}(?:[ \t]*;[^\r\n]{0,64})?\r\n"
_FRAMINGS = re.compile(_FRAMING)
#: how far back from a look's newest byte a marker cut by chunk framing is looked for: a
#: chat stream's last event and what a server sends in the half second after it (pings)
#: end there; the pattern costs ~4 ns a byte, the whole marker's search ~0.4. A Responses
#: or Messages marker cut so is found otherwise: the event names itself twice (``event:``
#: and ``type``), and its stream is read again once that event goes on
CUT_WINDOW = 256


def _cut_marks(marks: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """The framing between two HTTP chunks, then the end of one of ``marks`` and what ends a
    marker (a line end, a JSON string's quote, the chunk's own CRLF). What a chunk's data
    starts with otherwise (``data:``, ``event:``, ``:``) fails the pattern at once."""
    ends = sorted({m[k:] for m in marks for k in range(1, len(m))}, key=len, reverse=True)
    return re.compile(_FRAMING + b"(?=(?:" + b"|".join(map(re.escape, ends)) + rb')["\r\n])')


_CUT_MARKS = {api: _cut_marks(marks) for api, marks in apis.END_MARKS.items()}


def mark_end(seen: bytes, api: str, chunked: bool, after: int) -> int:
    """Just past the last bytes of ``api``'s last event in ``seen`` (raw reads, chunk
    framing included when ``chunked``), or 0; bytes cut by chunk framing are looked for
    only when no whole marker ends past ``after`` (the bytes an earlier look saw)."""
    at = 0
    for m in apis.END_MARKS[api]:
        k = seen.rfind(m)
        if k >= 0 and k + len(m) > at:
            at = k + len(m)
    if chunked and at <= after:
        at = max(at, cut_mark_end(seen, api))
    return at


def cut_mark_end(seen: bytes, api: str) -> int:
    """Just past the last marker of ``api`` that the framing of HTTP chunks cuts (its end
    after the last framing, its start before it, in one piece or more: ``[D``, ``ON``,
    ``E]``) in the last ``CUT_WINDOW`` bytes of ``seen``, or 0."""
    at = 0
    start = max(0, len(seen) - CUT_WINDOW)
    pattern = _CUT_MARKS[api]
    f = pattern.search(seen, start)
    while f is not None:
        a, b = f.span()
        before = _FRAMINGS.sub(b"", seen[start:a])  # the pieces before, their framing out
        for m in apis.END_MARKS[api]:
            for k in range(1, len(m)):
                if seen.startswith(m[k:], b) and before.endswith(m[:k]):
                    at = max(at, b + len(m) - k)
        f = pattern.search(seen, b)
    return at


def unframed(seen: bytes) -> bytes:
    """``seen`` (raw reads of a chunked body) without the framing between its HTTP chunks:
    a word the framing cuts (``err``, ``or``) whole again."""
    return _FRAMINGS.sub(b"", seen)


def in_unfinished_event(pieces: list[bytes], api: str) -> bool:
    """Whether the bytes of ``api``'s last event are in an event not ended yet (after the
    last blank line of the body so far, ``pieces``): that event came in part."""
    body = b"".join(pieces)
    rest = body[event_start([body], 0, len(body), 0):]
    return any(m in rest for m in apis.END_MARKS[api])
