"""The streaming HTTP reader (``agentbench.transport.stream``) and the SSE reading it
feeds: chunk framing removed after the last byte, every piece stamped with the read that
brought its last byte, whatever way the bytes were cut into reads."""

from __future__ import annotations

import random
import re

import pytest

from agentbench.testing.fastserver import events
from agentbench.transport import chunked as chunking
from agentbench.transport import pool as connpool
from agentbench.transport import sse, stream

#: the response head agentbench.testing.fastserver writes: an SSE stream, chunked
_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n")


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk, as the fast server frames each write: size in hex, data."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def chunked(evs: list[bytes]) -> bytes:
    return b"".join(map(_chunk, evs)) + b"0\r\n\r\n"


def cut(raw: bytes, sizes: list[int]) -> list[bytes]:
    out, pos = [], 0
    for n in sizes:
        out.append(raw[pos:pos + n])
        pos += n
    if pos < len(raw):
        out.append(raw[pos:])
    return [r for r in out if r]


def reference(reads: list[bytes], times: list[int]) -> tuple[bytes, list[int]]:
    """The body and, per body byte, the stamp of the read it came in: by hand, byte by
    byte (what every decoding must agree with)."""
    raw, stamp_of = b"", []
    for r, t in zip(reads, times, strict=True):
        raw += r
        stamp_of += [t] * len(r)
    body, stamps, pos = b"", [], 0
    while True:
        nl = raw.index(b"\r\n", pos)
        size = int(raw[pos:nl].split(b";")[0], 16)
        if size == 0:
            return body, stamps
        body += raw[nl + 2:nl + 2 + size]
        stamps += stamp_of[nl + 2:nl + 2 + size]
        pos = nl + 2 + size + 2


def check_pieces(pieces: list[bytes], times: list[int], reads: list[bytes],
                 read_times: list[int]) -> None:
    body, stamps = reference(reads, read_times)
    assert b"".join(pieces) == body
    # each piece's stamp is the stamp of its last byte
    pos = 0
    for p, t in zip(pieces, times, strict=True):
        pos += len(p)
        assert stamps[pos - 1] == t


EVS = events(True, 12)


@pytest.mark.parametrize("sizes", [
    None,  # one read per chunk
    [1] * 5000,  # one byte per read
    [7, 300, 2, 2, 900],
    [len(chunked(EVS)) - 3],  # the terminator cut in two
])
def test_dechunk_any_cut(sizes: list[int] | None) -> None:
    raw = chunked(EVS)
    reads = [_chunk(e) for e in EVS[:-1]] + [_chunk(EVS[-1]) + b"0\r\n\r\n"] \
        if sizes is None else cut(raw, sizes)
    times = list(range(100, 100 + len(reads)))
    out = chunking.dechunk(reads, times)
    assert out is not None
    check_pieces(*out, reads, times)
    # through a connection: the same pieces, and the end found wherever the cut falls
    r = stream.Response()
    r.chunked, r.reads, r.times = True, reads, times
    assert chunking.chunk_state(raw) == "complete"
    r.decoded = chunking.decode_chunked(raw)  # type: ignore[assignment]
    check_pieces(*r.body(), reads, times)


def test_random_cuts_and_odd_framing() -> None:
    rng = random.Random(0)
    # chunk extensions, upper-case hex, CRLF inside data, trailers: the slow path
    raw = (b"A;ext=1\r\n0123456789\r\n" + b"4\r\nab\r\n\r\n" + _chunk(EVS[1])
           + b"0\r\nX-Trailer: 1\r\n\r\n")
    for _ in range(50):
        sizes = [rng.randint(1, 40) for _ in range(40)]
        reads = cut(raw, sizes)
        times = list(range(len(reads)))
        out = chunking.dechunk(reads, times)
        assert out is not None
        pieces, stamps = out
        assert b"".join(pieces) == b"0123456789ab\r\n" + EVS[1]
        check_pieces(pieces, stamps, reads, times)
    assert chunking.chunk_state(raw[:-1]) == "more"
    assert chunking.chunk_state(b"zz\r\nab\r\n0\r\n\r\n") == "bad"


def test_partial_body() -> None:
    raw = chunked(EVS)
    reads = cut(raw, [200, 200])[:2]  # the rest never came
    out = chunking.dechunk(reads, [1, 2], partial=True)
    assert out is not None
    assert b"".join(out[0]) == b"".join(EVS)[:len(b"".join(out[0]))]
    assert chunking.dechunk(reads, [1, 2]) is None


@pytest.mark.timeout(30)
async def test_connection_finds_the_end_however_cut() -> None:
    pool = connpool.Pool("http://127.0.0.1:9/v1/chat/completions")
    raw = _HEAD + chunked(EVS)
    for sizes in ([len(raw)], [len(_HEAD)] + [len(_chunk(e)) for e in EVS], [3] * 2000,
                  [len(raw) - 1], [len(raw) - 7] + [1] * 7):
        conn = stream.Conn(pool)
        conn.alive = True
        conn.begin(0)
        for piece in cut(raw, sizes):
            assert conn.done is not None and not conn.done.done()
            conn.data_received(piece)
        assert conn.done is not None and conn.done.done()
        assert conn.resp is not None and conn.resp.status == 200
        pieces, _ = conn.resp.body()
        assert b"".join(pieces) == b"".join(EVS)


@pytest.mark.timeout(30)
async def test_crlf_events_and_trailers() -> None:
    """SSE written with CRLF line ends (every chunk ends in CRLF CRLF CRLF) and a body with
    trailers: the end is found, once, at the end."""
    pool = connpool.Pool("http://127.0.0.1:9/x")
    crlf = [e.replace(b"\n", b"\r\n") for e in EVS]
    for body in (b"".join(map(_chunk, crlf)) + b"0\r\n\r\n",
                 chunked(EVS)[:-2] + b"X-Checksum: 1\r\n\r\n"):
        conn = stream.Conn(pool)
        conn.alive = True
        conn.begin(0)
        conn.data_received(_HEAD)
        reads = cut(body, [len(_chunk(e)) for e in crlf])
        for r in reads:
            assert conn.done is not None and not conn.done.done()
            conn.data_received(r)
        assert conn.done is not None and conn.done.done() and conn.done.exception() is None


@pytest.mark.timeout(30)
async def test_content_length_and_close_delimited() -> None:
    pool = connpool.Pool("http://127.0.0.1:9/x")
    conn = stream.Conn(pool)
    conn.alive = True
    conn.begin(0)
    conn.data_received(b"HTTP/1.1 429 Too Many\r\nContent-Length: 5\r\nRetry-After: 2\r\n\r\nsl")
    assert conn.done is not None and not conn.done.done()
    conn.data_received(b"ow")
    conn.data_received(b"!")
    assert conn.done.done() and conn.resp is not None
    assert conn.resp.status == 429 and conn.resp.headers["retry-after"] == "2"
    assert b"".join(conn.resp.body()[0]) == b"slow!"
    conn.begin(0)
    conn.data_received(b"HTTP/1.0 200 OK\r\n\r\ndata: x\n\n")
    assert not conn.done.done()
    conn.connection_lost(None)
    assert conn.done.done() and conn.done.exception() is None
    conn2 = stream.Conn(pool)
    conn2.alive = True
    conn2.begin(0)
    conn2.data_received(_HEAD + _chunk(EVS[0]))
    conn2.connection_lost(None)  # cut mid-stream: disconnected, the bytes so far kept
    assert conn2.done is not None
    exc = conn2.done.exception()
    assert isinstance(exc, stream.StreamError) and exc.kind == "disconnected"
    assert conn2.resp is not None
    assert b"".join(conn2.resp.body(partial=True)[0]) == EVS[0]


def regex_flags(evs: list[bytes]) -> list[bool]:
    return [sse._TOKEN_RE.search(ev) is not None for ev in evs]


@pytest.mark.parametrize("evs", [
    [e[:-2] for e in events(True, 20)],
    [e[:-2] for e in events(False, 20)],
    # an empty content in the middle, a tool call, a reasoning delta, odd spacing
    [b'data: {"id":"a","choices":[{"delta":{"content":"x"}}]}',
     b'data: {"id":"a","choices":[{"delta":{"content":""}}]}',
     b'data: {"id":"a","choices":[{"delta":{"content":"y"}}]}',
     b'data: {"id":"a","choices":[{"delta":{"tool_calls":[{"index":0}]}}]}',
     b'data: {"id":"a","choices":[{"delta":{"reasoning_content":"r"}}]}',
     b'data: {"id":"a","choices":[{"delta":{"content" : "z"}}]}',
     b'data: {"id":"a","choices":[{"delta":{"content":"w","x":"\\"content\\":\\""}}]}'],
    # no token event at all
    [b'data: {"id":"a","choices":[{"delta":{"role":"assistant"}}]}'],
])
def test_token_flags_agree_with_the_regex(evs: list[bytes]) -> None:
    assert sse._token_flags(evs)[0] == regex_flags(evs)
    assert sse._token_flags(evs, b"\n\n".join(evs))[0] == regex_flags(evs)


def test_one_event_per_chunk_stamps() -> None:
    evs = events(True, 8)
    times = [10 * i for i in range(len(evs))]
    one = sse.parse_stream(evs, times)  # each chunk one event: event k is chunk k
    many = sse.parse_stream([b"".join(evs[:3]), *evs[3:]], [20, *times[3:]])
    assert one.token_event_ns == times[1:9]
    assert many.token_event_ns == [20, 20, *times[3:9]]
    assert re.search(b"usage", evs[-2]) and one.completion_tokens == 8


@pytest.mark.timeout(30)
async def test_pool_reuses_and_closes_idle_connections(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """A released connection is handed out again; one idle for KEEPALIVE_S is closed (the
    server sees it go), so a long-lived loop keeps no sockets of finished replays."""
    import asyncio

    closed = asyncio.Event()
    accepted = []

    class Server(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.append(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            closed.set()

    loop = asyncio.get_running_loop()
    srv = await loop.create_server(Server, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    monkeypatch.setattr(connpool, "KEEPALIVE_S", 0.05)
    try:
        pool = connpool.Pool(f"http://127.0.0.1:{port}/v1/chat/completions", limit=1)
        a = await pool.acquire(5)
        pool.release(a)
        assert await pool.acquire(5) is a and pool.open == 1
        pool.release(a)
        await asyncio.wait_for(closed.wait(), 10)
        assert len(accepted) == 1 and not pool.idle and pool.open == 0
    finally:
        srv.close()
        await srv.wait_closed()


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_each_loop_takes_its_cheaper_read_path(loop_kind: str) -> None:
    """asyncio's selector loop reads into the pool's buffer (``get_buffer``: no 256 KiB
    allocation per read); uvloop calls ``data_received`` directly (one Python call per
    read). Either way the same body arrives, one read per event."""
    import asyncio

    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        new_loop = uvloop.new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    raw = _HEAD + chunked(EVS)
    calls = {"get_buffer": 0, "data_received": 0}

    class Counted(stream.Conn):
        def get_buffer(self, sizehint: int) -> memoryview:
            calls["get_buffer"] += 1
            return super().get_buffer(sizehint)

        def data_received(self, data: bytes) -> None:
            calls["data_received"] += 1
            super().data_received(data)

    async def main() -> bytes:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            for piece in cut(raw, [len(_HEAD)] + [len(_chunk(e)) for e in EVS]):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.002)  # each write its own read
            writer.close()

        srv = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        pool = connpool.Pool(f"http://127.0.0.1:{port}/x")
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: Counted(pool), "127.0.0.1", port)
        resp = conn.begin(0)
        await conn.write(pool.head({}, 0))
        assert conn.done is not None
        await asyncio.wait_for(conn.done, 10)
        conn.end(False)
        srv.close()
        await srv.wait_closed()
        return b"".join(resp.body()[0])

    loop = new_loop()
    try:
        body = loop.run_until_complete(main())
    finally:
        loop.close()
    assert body == b"".join(EVS)
    assert calls["data_received"] >= len(EVS)
    if loop_kind == "uvloop":
        assert calls["get_buffer"] == 0
    else:
        assert calls["get_buffer"] == calls["data_received"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_an_answer_before_the_body_is_sent_ends_the_request(loop_kind: str) -> None:
    """A server may answer (413, say) and close before reading a long body: the request
    ends with that answer within its timeout, not waiting forever to write the rest."""
    import asyncio
    import time

    import aiohttp

    from agentbench.transport import http

    new_loop = pytest.importorskip("uvloop").new_event_loop if loop_kind == "uvloop" \
        else asyncio.new_event_loop

    async def main() -> tuple[http.RequestRecord, float]:
        handlers: list[asyncio.Task[None] | None] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            handlers.append(asyncio.current_task())  # type: ignore[arg-type]
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.close()

        srv = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        target = http.Target("x", f"http://127.0.0.1:{port}/v1/chat/completions", {},
                             aiohttp.ClientTimeout(total=5, sock_read=2.0))
        rec = http.RequestRecord(1, "s", "measure", "x", 0, "t", "s", "root", 0, 0, 0, 0, 0, 0)
        body = http.make_body([b"x" * (256 * 1024)] * 128)  # 32 MiB, never read
        t0 = time.perf_counter_ns()
        await asyncio.wait_for(http.send(None, target, body, "t", rec, t0), 15)
        took = (time.perf_counter_ns() - t0) / 1e9
        target.close()
        srv.close()
        await srv.wait_closed()
        # a handler may still wait on its write (3.11's wait_closed does not wait for
        # handlers): ended here, not left pending when the loop closes
        for task in handlers:
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in handlers if t is not None), return_exceptions=True)
        return rec, took

    loop = new_loop()
    try:
        rec, took = loop.run_until_complete(main())
    finally:
        loop.close()
    assert rec.http_status == 413 and rec.error_type == "http_413", rec
    assert took < 5


@pytest.mark.timeout(30)
async def test_odd_but_valid_last_chunks_and_capped_error_bodies() -> None:
    """The last chunk written "000" or with an extension ends the answer (RFC 9112 7.1); a
    failed answer whose chunked body keeps coming ends at the error-body cap; a negative
    Content-Length is a bad answer."""
    p = connpool.Pool("http://127.0.0.1:9/x")
    body = b"".join(map(_chunk, EVS))
    for last in (b"000\r\n\r\n", b"0;done=1\r\n\r\n", b"0 ;x\r\nX-T: 1\r\n\r\n"):
        conn = stream.Conn(p)
        conn.alive = True
        conn.begin(0)
        conn.data_received(_HEAD)
        for r in cut(body + last, [len(_chunk(e)) for e in EVS]):
            assert conn.done is not None and not conn.done.done()
            conn.data_received(r)
        assert conn.done is not None and conn.done.done() and conn.done.exception() is None
        assert conn.resp is not None and b"".join(conn.resp.body()[0]) == b"".join(EVS)
    conn = stream.Conn(p)
    conn.alive = True
    conn.begin(0)
    conn.data_received(_HEAD.replace(b"200 OK", b"500 Internal"))
    piece = _chunk(b"x" * 8000)
    for _ in range(20):  # 160 KB of an unfinished error body
        if conn.done is not None and conn.done.done():
            break
        conn.data_received(piece)
    assert conn.done is not None and conn.done.done() and conn.resp is not None
    assert conn.resp.status == 500 and not conn.keep
    conn = stream.Conn(p)
    conn.alive = True
    conn.begin(0)
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nabc")
    assert conn.done is not None and isinstance(conn.done.exception(), stream.StreamError)


@pytest.mark.timeout(30)
async def test_a_chunked_error_body_cut_at_the_cap_keeps_its_start_as_the_message() -> None:
    """A 500 whose chunked body runs past the error-body cap: the row's message is the
    body's start (it was the reason phrase alone: the cut body was not decoded)."""
    import aiohttp

    from agentbench.results.schema import RequestRecord
    from agentbench.transport import http

    conn = stream.Conn(connpool.Pool("http://127.0.0.1:9/x"))
    conn.alive = True
    resp = conn.begin(0)
    conn.data_received(_HEAD.replace(b"200 OK", b"500 Oops"))
    conn.data_received(_chunk(b'{"error":{"message":"model overloaded"}}'))
    for _ in range(20):  # 160 KB more of it
        if conn.done is not None and conn.done.done():
            break
        conn.data_received(_chunk(b" " * 8000))
    assert conn.done is not None and conn.done.done()
    rec = RequestRecord(request_id=0, stage="s", phase="measure", endpoint="e", lane=0,
                        tree_id="t#0", session_id="t", relation="root", copy=0, turn=0,
                        scheduled_ns=0, expected_input_tokens=1, expected_output_tokens=1,
                        potential_cached_tokens=0)
    target = http.Target("e", "http://127.0.0.1:9/x", {}, aiohttp.ClientTimeout(total=5))
    http._refused(rec, resp, 500, target)
    assert rec.error_type == "http_500"
    assert rec.error_message is not None and "model overloaded" in rec.error_message


@pytest.mark.timeout(30)
async def test_bytes_on_an_idle_connection_retire_it() -> None:
    """Bytes nobody asked for on an idle keep-alive connection: it is closed, and the pool
    hands out a fresh one."""
    import asyncio

    served = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(writer)
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            if len(served) == 1:
                await asyncio.sleep(0.05)
                writer.write(b"HTTP/1.1 500 Stray\r\nContent-Length: 0\r\n\r\n")

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    p = connpool.Pool(f"http://127.0.0.1:{port}/x")
    try:
        first = await p.acquire(5)
        first.begin(0)
        await first.write(p.head({}, 0))
        assert first.done is not None
        await first.done
        first.end(True)
        await asyncio.sleep(0.2)  # the stray answer arrives while idle
        second = await p.acquire(5)
        assert second is not first and len(served) == 2
        resp = second.begin(0)
        await second.write(p.head({}, 0))
        assert second.done is not None
        await asyncio.wait_for(second.done, 5)
        second.end(True)
        assert resp.status == 200 and p.open == 1
    finally:
        p.close()
        srv.close()
        await srv.wait_closed()


#: chunk-size lines that are no 1*HEXDIG (RFC 9112 7.1) but Python's int(x, 16) reads
_NOT_HEX = (b"-6", b"+2f", b"0x2f", b"2_f", b"-0")


def test_a_chunk_size_that_is_not_hex_digits_is_bad_framing_not_a_loop() -> None:
    """A chunk size written '-6' after a chunk pointed the reader back at its own line:
    it read that line again forever, in the event loop, its list of spans growing (a
    server that sent it hung agentbench until the OOM killer, 24 GB later). Sizes are
    hex digits only; anything else is bad framing, in every reader of the body. Run in a
    process of its own with its memory bounded, so a loop fails the test, not the host."""
    import subprocess
    import sys

    code = f"""
import resource
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from agentbench.transport import chunked as c
ev = {EVS[0]!r}
for size in {_NOT_HEX!r}:
    raw = b"%x\\r\\n" % len(ev) + ev + b"\\r\\n" + size + b"\\r\\n" + ev + b"\\r\\n0\\r\\n\\r\\n"
    assert c.chunk_state(raw) == "bad", size
    assert c.decode_chunked(raw) == "bad", size
    assert c.dechunk([raw], [1]) is None, size
    part = c.dechunk([raw], [1], partial=True)
    assert part is not None and part[0] == [ev], (size, part)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
