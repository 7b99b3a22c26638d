"""The lines of an SSE stream as the standard reads them (WHATWG HTML, server-sent events,
"parsing an event stream"): lines end with CRLF, LF or CR, and a byte order mark that
starts the stream is dropped. The chat reader (:mod:`agentbench.transport.sse`) reads LF
lines, so it has a stream with a CR written as LF first (rare: a server's line ends are
all LF in practice); both readers drop the mark (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Sequence

#: the UTF-8 byte order mark, which SSE readers drop from the start of a stream
BOM = b"\xef\xbb\xbf"


def without_bom(chunks: Sequence[bytes]) -> Sequence[bytes]:
    """``chunks`` without a byte order mark at the stream's start, however the reads cut
    it; the same sequence when there is none. The chunks keep their places (a chunk that
    was all mark is left empty), so their stamps still pair with them."""
    first = chunks[0] if chunks else b"-"
    if first.startswith(BOM):
        return [first[3:], *chunks[1:]]
    if len(first) >= len(BOM) or not BOM.startswith(first):  # the usual case: no mark
        return chunks
    out, left = list(chunks), BOM  # a first read shorter than the mark
    for i, c in enumerate(out):
        k = min(len(c), len(left))
        if c[:k] != left[:k]:
            return chunks
        out[i], left = c[k:], left[k:]
        if not left:
            return out
    return chunks


def lf_lines(chunks: Sequence[bytes]) -> list[bytes]:
    """``chunks`` with every line end (CRLF, CR) written LF, each chunk in its place. A CRLF
    cut between two chunks is one line end, the LF's: it ends in the chunk that brought its
    last byte, as the other line ends do."""
    out = []
    for i, c in enumerate(chunks):
        if b"\r" in c:
            if c.endswith(b"\r"):
                j = i + 1  # the next chunk with a byte (a read is never empty; a mark's is)
                while j < len(chunks) and not chunks[j]:
                    j += 1
                if j < len(chunks) and chunks[j].startswith(b"\n"):
                    c = c[:-1]
            c = c.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out.append(c)
    return out
