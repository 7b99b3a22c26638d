"""What a server sends is bounded before the client holds it: usage counts past any sane
size (beyond 64-bit integers, or absurd), responses and SSE events that never end, a status
code of many digits. Each ends as a row that is written and read, never as a crash or
memory without end."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from agentbench.metrics import format_summary, summarize
from agentbench.results import schema as R
from agentbench.results.schema import RequestRecord
from agentbench.results.writer import ResultsWriter
from agentbench.transport import http, sse, stream
from agentbench.transport import pool as connpool
from agentbench.transport.finish import finish_record

MIB = 1024 * 1024
#: the bounds chosen (checked against the modules' own in ``test_the_bounds_chosen``)
USAGE_MAX = 2**31 - 1
MAX_RESPONSE_BYTES, MAX_EVENT_BYTES, CHECK_EVERY = 64 * MIB, 4 * MIB, MIB
TOKEN = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _rec(chunks: list[bytes], expected_in: int = 2000) -> RequestRecord:
    r = RequestRecord(request_id=0, stage="s", phase="measure", endpoint="e", lane=0,
                      tree_id="t#0", session_id="t", relation="root", copy=0, turn=0,
                      scheduled_ns=0, expected_input_tokens=expected_in,
                      expected_output_tokens=3, potential_cached_tokens=0, sent_ns=0,
                      end_ns=9_000_000, http_status=200)
    r.chunks = chunks
    r.chunk_ns = [1_000_000 * (i + 1) for i in range(len(chunks))]
    return r


def _usage(prompt: object, completion: object, cached: object = 0) -> bytes:
    return (b'data: {"choices":[],"usage":{"prompt_tokens":%s,"completion_tokens":%s,'
            b'"prompt_tokens_details":{"cached_tokens":%s}}}\n\ndata: [DONE]\n\n'
            % (str(prompt).encode(), str(completion).encode(), str(cached).encode()))


def test_usage_past_any_sane_count_keeps_its_row_and_counts_as_impossible(
        tmp_path: Path) -> None:
    """Usage beyond 64-bit integers (2**70, 1e300, -2**70) once made the writer raise
    OverflowError and lost the row (the run exited 1); absurd but representable usage
    (10**12 tokens for a 2,000-token prompt) was believed. Both are kept as one past
    USAGE_MAX, written, read, and counted as impossible usage."""
    bodies = [_usage(1900, 3), _usage(2**70, 2**70, 2**70), _usage(10**12, 10**12),
              _usage(1900, "1e300"), _usage(-2**70, 3), _usage(2**31 - 1, 3)]
    rows = [finish_record(_rec([TOKEN, TOKEN, TOKEN, b])) for b in bodies]
    for row in rows:
        assert row["status"] == "ok"
        for k in ("prompt_tokens", "completion_tokens", "cached_tokens"):
            assert abs(row[k]) <= USAGE_MAX + 1, (k, row[k])
        assert row["token_event_tokens"] == [1, 1, 1]  # fits int32: not split from 2**70
    assert rows[1]["prompt_tokens"] == rows[2]["completion_tokens"] == USAGE_MAX + 1
    run = tmp_path / "run"
    run.mkdir()
    w = ResultsWriter(run)
    for i, row in enumerate(rows):
        w.add_request({**row, "request_id": i})
    w.close()
    assert w.failure is None
    (run / R.RUN_FILE).write_text(json.dumps({"scenario": {"name": "x"}}))
    s = summarize(run, write=False)
    o = s["overall"]
    # 2**70, 10**12, 1e300, -2**70 are impossible; 2**31 - 1 is the largest count believed
    assert o["requests"]["usage_invalid"] == 4
    assert o["tokens"]["input_uncached"] >= 0
    assert "over 2**31" in format_summary(s)


def test_the_bounds_chosen() -> None:
    """The usage bound the transport and the metrics share (results.schema), and the
    transport's byte bounds, are the figures chosen."""
    from agentbench.metrics import derive

    assert derive.USAGE_MAX == sse.USAGE_MAX == USAGE_MAX
    assert (stream.MAX_RESPONSE_BYTES, stream.MAX_EVENT_BYTES, stream.CHECK_EVERY) == (
        MAX_RESPONSE_BYTES, MAX_EVENT_BYTES, CHECK_EVERY)


def _conn() -> stream.Conn:
    conn = stream.Conn(connpool.Pool("http://127.0.0.1:9/x"))
    conn.alive = True
    conn.begin(0)
    return conn


def _failure(conn: stream.Conn) -> stream.StreamError | None:
    assert conn.done is not None
    if not conn.done.done():
        return None
    exc = conn.done.exception()
    assert exc is None or isinstance(exc, stream.StreamError)
    return exc


@pytest.mark.timeout(30)
async def test_a_status_code_of_many_digits_is_a_bad_answer() -> None:
    """An HTTP status is three digits (RFC 9112): one of twenty digits would overflow the
    row's int32 column."""
    for line in (b"HTTP/1.1 99999999999999999999 OK", b"HTTP/1.1 2000 OK", b"HTTP/1.1 +20 OK",
                 b"HTTP/1.1 2_0 OK"):
        conn = _conn()
        conn.data_received(line + b"\r\nContent-Length: 0\r\n\r\n")
        exc = _failure(conn)
        assert exc is not None and exc.kind == "disconnected", line
        assert conn.resp is not None and conn.resp.status == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("framing", ["chunked", "close"])
async def test_an_endless_response_is_cut_at_the_response_cap(framing: str) -> None:
    """Well-formed events without end (chunked, or a body that ends when the connection
    closes): the request fails ``response_too_large`` once past MAX_RESPONSE_BYTES, and no
    more than that (and a read) is held."""
    conn = _conn()
    ev = TOKEN * 1000  # 46 KB of whole events per read
    piece = _chunk(ev) if framing == "chunked" else ev
    conn.data_received(HEAD if framing == "chunked" else
                       b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
    fed = 0
    while _failure(conn) is None and fed < 2 * MAX_RESPONSE_BYTES:
        conn.data_received(piece)
        fed += len(piece)
    exc = _failure(conn)
    assert exc is not None and exc.kind == "response_too_large", exc
    assert "MAX_RESPONSE_BYTES" in str(exc) and "\n" not in str(exc)
    assert conn.resp is not None
    held = sum(map(len, conn.resp.reads))
    assert MAX_RESPONSE_BYTES < held <= MAX_RESPONSE_BYTES + len(piece)
    conn.data_received(piece)  # bytes after the failure are not kept
    assert sum(map(len, conn.resp.reads)) == held and not conn.keep


@pytest.mark.timeout(60)
async def test_an_endless_sse_line_is_cut_at_the_event_cap() -> None:
    """One SSE event that never ends (no blank line): cut between MAX_EVENT_BYTES and that
    plus CHECK_EVERY, long before the response cap."""
    conn = _conn()
    conn.data_received(HEAD + _chunk(TOKEN * 3 + b'data: {"choices":[{"delta":{"content":"'))
    piece = _chunk(b"a" * 65536)
    fed = 0
    while _failure(conn) is None and fed < MAX_RESPONSE_BYTES:
        conn.data_received(piece)
        fed += len(piece)
    exc = _failure(conn)
    assert exc is not None and exc.kind == "response_too_large", exc
    assert "MAX_EVENT_BYTES" in str(exc)
    assert MAX_EVENT_BYTES < fed <= MAX_EVENT_BYTES + CHECK_EVERY + 2 * len(piece)


@pytest.mark.timeout(60)
async def test_long_events_under_the_event_cap_are_not_cut() -> None:
    """Events of 3 MiB each (a whole answer in one event, say), however the reads split
    them and their blank lines (LF, CRLF or CR line ends): a 40 MiB answer arrives whole."""
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        conn = _conn()
        conn.data_received(HEAD)
        event = b'data: {"choices":[{"delta":{"content":"' + b"b" * (3 * MIB) + b'"}}]}' + sep
        raw = _chunk(event) * 13 + b"0\r\n\r\n"
        step = 65536 + 1  # reads that split blank lines and chunk framing anywhere
        for i in range(0, len(raw), step):
            assert _failure(conn) is None, (sep, i)
            conn.data_received(raw[i:i + step])
        assert conn.done is not None and conn.done.done() and _failure(conn) is None, sep


def test_event_start_finds_a_blank_line_split_between_reads() -> None:
    reads = [b"data: 1\n", b"\ndata: 2", b"222", b"22\r", b"\r"]
    end = sum(map(len, reads))
    assert sse.event_start(reads, 0, end, 0) == end  # the CR CR across the last two reads
    assert sse.event_start(reads[:4], 0, end - 1, 0) == len(reads[0]) + 1
    assert sse.event_start(reads[:4], 4, end - 1, 3) == 3  # none since read 4: as it was
    assert sse.event_start(reads[:2], 1, len(b"".join(reads[:2])), 0) == len(reads[0]) + 1


def test_reading_a_long_cut_event_costs_its_length_not_its_square() -> None:
    """The rows of a request cut mid-event are read after the cut: an event of 24 MiB in
    64 KiB reads took ~60 s (each read joined onto all before it), now well under 1 s."""
    chunks = [b'data: {"choices":[{"delta":{"content":"'] + [b"a" * 65536] * 384
    t = time.perf_counter()
    st = sse.parse_stream(chunks, list(range(len(chunks))))
    assert time.perf_counter() - t < 8
    assert st.error_type == "malformed_sse"


async def _serve(writes: Callable[[asyncio.StreamWriter], Awaitable[None]],
                 handlers: set[asyncio.Task[None]]) -> tuple[asyncio.AbstractServer, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await reader.readuntil(b"\r\n\r\n")
            await writes(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["stream", "line"])
async def test_a_server_that_never_ends_its_answer_gives_an_error_row(kind: str) -> None:
    """Over a socket, as a run sends: an endless stream of events, or one endless SSE line,
    ends the request as a ``response_too_large`` row within seconds (the request timeout
    is 60 s and no read stalls), its tokens so far kept, the bytes held bounded."""
    async def endless(writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        if kind == "line":
            writer.write(_chunk(TOKEN + b'data: {"choices":[{"delta":{"content":"'))
        piece = _chunk(TOKEN * 1400 if kind == "stream" else b"a" * 65536)
        for _ in range(3 * MAX_RESPONSE_BYTES // len(piece)):  # then it stalls
            writer.write(piece)
            await writer.drain()
        await asyncio.sleep(60)

    handlers: set[asyncio.Task[None]] = set()
    srv, port = await _serve(endless, handlers)
    target = http.Target("x", f"http://127.0.0.1:{port}/v1/chat/completions", {},
                         aiohttp.ClientTimeout(total=60, sock_read=5))
    rec = _rec([])
    rec.http_status = None
    t0 = time.perf_counter_ns()
    try:
        await asyncio.wait_for(http.send(None, target, b"{}", "t", rec, t0), 30)
    finally:
        target.close()
        srv.close()
        await srv.wait_closed()
        await asyncio.wait(handlers, timeout=10)  # each sees the client go
    assert rec.error_type == "response_too_large", (rec.error_type, rec.error_message)
    assert sum(map(len, rec.chunks)) <= MAX_RESPONSE_BYTES + connpool.READ_BUFFER
    t = time.perf_counter()
    row = finish_record(rec)
    assert time.perf_counter() - t < 10
    assert row["status"] == "error" and row["error_type"] == "response_too_large"
    assert row["token_events"] >= 1
