"""Line ends and a byte order mark, as the SSE standard allows them (WHATWG HTML,
server-sent events: lines end with CRLF, LF or CR; a leading U+FEFF is dropped), read
alike by all four APIs' readers. Before, a chat or completions stream with CR line ends
was a ``malformed_sse`` row (Responses and Messages read it), and a leading byte order
mark made every API's stream ``malformed_sse`` (docs/reliability.md)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench.testing.shapes import shape
from agentbench.transport import apis, sse

COUNTS = (40, 16, 5)
BOM = b"\xef\xbb\xbf"


def _events(api: str) -> list[bytes]:
    """A whole answer of five tokens, one event a chunk, its lines ended by LF."""
    w = shape(apis.path(api))
    evs = [w.opening(COUNTS)] if w.opening(COUNTS) else []
    evs += [w.token(f"w{i} ", i == 4, COUNTS) for i in range(5)]
    if (closing := w.closing(COUNTS, False)):
        evs.append(closing)
    return [*evs, w.end(COUNTS)]


def _cut(body: bytes, cuts: list[int]) -> list[bytes]:
    out, pos = [], 0
    for c in cuts:
        if pos < len(body):
            out.append(body[pos:pos + c])
            pos += c
    return [*out, body[pos:]] if pos < len(body) else out


def _read(api: str, chunks: list[bytes]) -> sse.StreamResult:
    return apis.read_stream(api, chunks, list(range(10, 10 * len(chunks) + 10, 10)))


@pytest.mark.parametrize("api", apis.APIS)
@pytest.mark.parametrize("end", [b"\r", b"\r\n"], ids=["CR", "CRLF"])
def test_every_api_reads_cr_and_crlf_line_ends_as_lf(api: str, end: bytes) -> None:
    evs = _events(api)
    want = _read(api, evs)
    assert want.error_type is None and want.done and len(want.token_event_ns) == 5
    assert _read(api, [e.replace(b"\n", end) for e in evs]) == want


@pytest.mark.parametrize("api", apis.APIS)
def test_every_api_drops_a_leading_byte_order_mark(api: str) -> None:
    evs = _events(api)
    want = _read(api, evs)
    assert _read(api, [BOM + evs[0], *evs[1:]]) == want
    # cut between reads: the stamps stay with their chunks
    assert _read(api, [BOM[:1], BOM[1:] + evs[0], *evs[1:]]).token_event_ns == \
        [t + 10 for t in want.token_event_ns]
    # only at the start: a mark before a later event is no SSE line
    bad = _read(api, [*evs[:2], BOM + evs[2], *evs[3:]])
    assert bad.error_type == "malformed_sse", bad


def test_a_crlf_cut_between_two_reads_is_one_line_end() -> None:
    """CR at the end of one read, LF at the start of the next: one line end, so no blank
    line is made or lost, and an event is over with the read of its last byte, the LF
    (token event k in chunks 2k + 2 and 2k + 3: stamped 10 (2k + 4))."""
    evs = [e.replace(b"\n", b"\r\n") for e in _events("chat")]
    chunks = []
    for e in evs:
        chunks += [e[:-1], e[-1:]]  # '...\r\n\r' then '\n'
    r = _read("chat", chunks)
    assert r.error_type is None and r.done and r.token_event_ns == [40, 60, 80, 100, 120]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(apis.APIS), st.lists(st.integers(1, 300), max_size=8),
       st.sampled_from([b"\r", b"\n"]), st.booleans())
def test_cr_line_ends_and_a_mark_read_as_lf_however_cut(api: str, cuts: list[int],
                                                        end: bytes, bom: bool) -> None:
    """LF to CR is a byte for a byte, so the same cuts give the same chunks: the stream
    reads the same either way, with or without a mark at its start."""
    body = b"".join(_events(api))
    chunks = _cut(body, cuts)
    other = _cut(body.replace(b"\n", end), cuts)
    if bom:
        other[0] = BOM + other[0]
    assert _read(api, other) == _read(api, chunks)


def test_a_long_cr_stream_is_read_in_work_linear_in_its_chunks() -> None:
    """A stream whose every chunk ends with a CR (CR line ends, or each CRLF cut between
    two reads): each such chunk looked for the next chunk with a byte by skipping every
    chunk before it, quadratic in the chunks (a 16,000-token stream took 0.54 s to read,
    against 9 ms with LF line ends, on the event loop that stamps the other requests).
    Counted here as chunks looked at, not timed: at most a few per chunk."""
    from collections.abc import Sequence

    from agentbench.transport.sselines import lf_lines

    class Counted(Sequence[bytes]):
        def __init__(self, items: list[bytes]) -> None:
            self.items, self.looks = items, 0

        def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
            self.looks += 1
            return self.items[i]

        def __len__(self) -> int:
            return len(self.items)

    n = 4000
    for chunks in ([b"data: x\r"] * n,  # CR line ends
                   [b"data: x\r", b"\n"] * (n // 2)):  # each CRLF cut between two reads
        counted = Counted(chunks)
        out = lf_lines(counted)
        assert b"".join(out) == b"".join(chunks).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        assert counted.looks <= 4 * n, counted.looks
