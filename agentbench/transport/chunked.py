"""HTTP/1.1 chunked transfer coding, read once the last byte has come: whether raw bytes
end with the last chunk, each chunk's data and where it ends, and a body cut into reads
turned into the data each read brought (``agentbench.transport.stream`` keeps the reads;
this module never sees a socket)."""

from __future__ import annotations

import re
from itertools import accumulate, repeat
from operator import add, sub

#: a chunk size (RFC 9112 7.1: 1*HEXDIG). Python's ``int(x, 16)`` also reads '-6', '+6',
#: '0x6' and '6_0': a size of -6 after a chunk pointed the reader back at its own line, read
#: again forever while its spans grew (docs/reliability.md)
_HEX = re.compile(rb"[0-9A-Fa-f]+")
#: a last-chunk line however written: "0", "000", "0;ext=1" (RFC 9112 7.1)
_LAST_CHUNK = re.compile(rb"(?:\A|\r\n)0+(?:[ \t]*;[^\r\n]*)?\r\n")


def chunk_state(raw: bytes, tail: bool = False) -> str:
    """Whether chunked bytes end with the last chunk: ``complete``, ``more`` or ``bad``
    (``tail``: only the last bytes are given; ``maybe`` when they look like an end)."""
    if tail:  # the last chunk "0" (after a chunk's CRLF, or first), then trailers, CRLF
        if raw.endswith(b"\r\n\r\n") and (b"\r\n0\r\n" in raw or raw.startswith(b"0")
                                          or _LAST_CHUNK.search(raw) is not None):
            return "maybe"
        return "more"
    dec = decode_chunked(raw)
    return dec if isinstance(dec, str) else "complete"


def decode_chunked(raw: bytes) -> tuple[list[bytes], list[int]] | str:
    """A complete chunked body as each chunk's data and the raw offset where that data
    ends; ``more`` if it is unfinished, ``bad`` if it is not chunked encoding. The usual
    body (no CRLF inside data, no extensions or trailers) is read with C-level splits and
    maps; anything else chunk by chunk."""
    parts = raw.split(b"\r\n")
    n = len(parts)
    if n >= 3 and n % 2 == 1 and parts[-1] == b"" and parts[-2] == b"" and parts[-3] == b"0":
        hexes, datas = parts[0:n - 3:2], parts[1:n - 3:2]
        try:
            sizes = list(map(int, hexes, repeat(16)))
        except ValueError:
            sizes = []
        if sizes == list(map(len, datas)) and all(sizes):
            # chunk k: hex, CRLF, data, CRLF
            lens = map(add, map(len, hexes), map(add, sizes, repeat(4)))
            return datas, list(map(sub, accumulate(lens), repeat(2)))
    spans = _walk(raw)
    if isinstance(spans, str):
        return spans
    return [raw[a:b] for a, b in spans], [b for _, b in spans]


def chunk_spans(raw: bytes) -> list[tuple[int, int]] | str:
    """The data spans ``(start, end)`` of a complete chunked body; ``more`` if it is
    unfinished, ``bad`` if it is not chunked encoding."""
    dec = decode_chunked(raw)
    if isinstance(dec, str):
        return dec
    return [(e - len(d), e) for d, e in zip(*dec, strict=True)]


def _walk(raw: bytes, partial: bool = False) -> list[tuple[int, int]] | str:
    """Chunk by chunk (chunk extensions, trailers, CRLF inside data). ``partial``: the spans
    of the data there is, for a body cut short."""
    spans: list[tuple[int, int]] = []
    pos, n = 0, len(raw)
    while True:
        nl = raw.find(b"\r\n", pos)
        if nl < 0:
            return spans if partial else ("more" if n - pos < 1024 else "bad")
        digits = raw[pos:nl].split(b";", 1)[0].strip()
        if _HEX.fullmatch(digits) is None:  # int(x, 16) reads '-6' too: a loop (_HEX)
            return spans if partial else "bad"
        size = int(digits, 16)
        start = nl + 2
        if size == 0:  # the last chunk, then trailers up to an empty line
            if partial:
                return spans
            if raw.startswith(b"\r\n", start):
                return spans if start + 2 == n else "bad"
            end = raw.find(b"\r\n\r\n", start)
            if end < 0:
                return "more"
            return spans if end + 4 == n else "bad"
        if n < start + size + 2:
            if partial:
                spans.append((start, min(n, start + size)))
                return spans
            return "more"
        if raw[start + size:start + size + 2] != b"\r\n":
            return spans if partial else "bad"
        spans.append((start, start + size))
        pos = start + size + 2


def dechunk(reads: list[bytes], times: list[int], partial: bool = False
            ) -> tuple[list[bytes], list[int]] | None:
    """Chunked reads as the body's bytes per read, with the stamps of the reads that brought
    body bytes; None when the bytes are not a complete chunked body (``partial``: the data
    of a body cut short, as far as it goes)."""
    raw = b"".join(reads)
    spans = _walk(raw, partial=True) if partial else chunk_spans(raw)
    if isinstance(spans, str):
        return None
    ends = list(accumulate(map(len, reads)))
    pieces: list[bytes] = []
    stamps: list[int] = []
    j, m, start = 0, len(spans), 0
    for end, t in zip(ends, times, strict=True):
        got = []
        while j < m:
            a, b = spans[j]
            if a >= end:
                break
            got.append(raw[max(a, start):min(b, end)])
            if b > end:
                break
            j += 1
        start = end
        if got:
            pieces.append(got[0] if len(got) == 1 else b"".join(got))
            stamps.append(t)
    return pieces, stamps
