"""A stream whose end marker came (chat and completions: ``data: [DONE]``; Responses:
``response.completed``, ``.incomplete``, ``.failed``; Messages: ``message_stop``) while its
HTTP body goes on: a server that keeps the connection open after it, pings after it, or
sends events after it. The request ends soon after the marker as the success it is,
stamped at the marker's read, its connection not used again; events after the marker are
not counted; a marker's bytes inside a token's text end nothing; and a server that ends
its body well keeps its connection (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
import pytest

from agentbench.results.schema import RequestRecord
from agentbench.testing.shapes import Shape, shape
from agentbench.transport import apis, http, stream
from agentbench.transport.finish import finish_record

HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
COUNTS = (10, 0, 3)
PING = b": ping\n\n"
#: a server step: bytes (one chunk, one write), a pause (s), END (the last chunk), PINGS
#: (a ping every 0.2 s for as long as the client listens), bytearray (written as they are)
END, PINGS = "end", "pings"
Step = bytes | bytearray | float | str
#: how long the tests let a request run (the stall timeout is longer than any pause)
STALL_S, TOTAL_S = 5.0, 20.0


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _wire(api: str) -> Shape:
    return shape(apis.path(api))


def _answer(api: str, tokens: int = 3) -> tuple[list[bytes], bytes]:
    """(the events up to the end marker's, the end marker's event) of a whole answer."""
    w = _wire(api)
    evs = [w.opening(COUNTS)] if w.opening(COUNTS) else []
    evs += [w.token(f"w{i} ", i == tokens - 1, COUNTS) for i in range(tokens)]
    closing = w.closing(COUNTS, False)
    if closing:
        evs.append(closing)
    return evs, w.end(COUNTS)


@dataclass
class Server:
    """A loopback HTTP/1.1 server that answers each request on a connection with the next
    script of steps (several requests a connection: keep-alive)."""

    scripts: list[Sequence[Step]]
    connections: int = 0
    marker_ns: list[int] = field(default_factory=list)  # when each marker was written
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.connections += 1
        try:
            while self.scripts:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                writer.write(HEAD)
                ended = False
                for step in self.scripts.pop(0):
                    if isinstance(step, float):
                        await asyncio.sleep(step)
                    elif isinstance(step, bytearray):
                        if step.startswith(b"MARK"):
                            step = step[4:]
                            self.marker_ns.append(time.perf_counter_ns())
                        writer.write(step)
                    elif step == END:
                        writer.write(b"0\r\n\r\n")
                        ended = True
                    elif step == PINGS:
                        while not await _closed_within(reader, 0.2):
                            writer.write(_chunk(PING))
                            await writer.drain()
                        return
                    else:
                        assert isinstance(step, bytes)
                        if step.startswith(b"MARK"):
                            step = step[4:]
                            self.marker_ns.append(time.perf_counter_ns())
                        writer.write(_chunk(step))
                    await writer.drain()
                if not ended:
                    await reader.read()  # the body never ends: until the client closes
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the client closed its end within ``seconds``."""
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b""
    except TimeoutError:
        return False


async def _send(srv: Server, api: str, requests: int = 1, stall_s: float = STALL_S
                ) -> list[tuple[RequestRecord, dict[str, object], float]]:
    """``requests`` requests one after another through one endpoint: each one's record,
    its requests.parquet row and how long it took (s)."""
    server = await asyncio.start_server(srv.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    target = http.Target("x", f"http://127.0.0.1:{port}{apis.path(api)}", {},
                         aiohttp.ClientTimeout(total=TOTAL_S, sock_read=stall_s))
    out = []
    try:
        for i in range(requests):
            rec = RequestRecord(request_id=i, stage="s", phase="measure", endpoint="x",
                                lane=0, tree_id="t#0", session_id="t", relation="root",
                                copy=0, turn=0, scheduled_ns=0, expected_input_tokens=10,
                                expected_output_tokens=3, potential_cached_tokens=0,
                                api=api)
            t0 = time.perf_counter_ns()
            await http.send(None, target, b"{}", "t", rec, t0)
            took = (time.perf_counter_ns() - t0) / 1e9
            if srv.marker_ns:
                srv.marker_ns[-1] -= t0
            out.append((rec, finish_record(rec), took))
    finally:
        target.close()
        server.close()
        if srv.handlers:  # each handler ends when its client closes
            await asyncio.wait(srv.handlers, timeout=10)
        for task in srv.handlers:
            task.cancel()
        with contextlib.suppress(Exception):
            await server.wait_closed()
    return out


def _ok_at_the_marker(srv: Server, rec: RequestRecord, row: dict[str, object], took: float,
                      tokens: int = 3) -> None:
    """The row is a success with its tokens, ended at the marker's read: its end stamp
    within a read's delay of when the server wrote the marker, and the request over
    about a grace after it, well before the stall timeout."""
    assert row["status"] == "ok", (row["error_type"], row["error_message"])
    assert row["token_events"] == tokens
    assert isinstance(rec.end_ns, int) and isinstance(row["last_token_ns"], int)
    marker = srv.marker_ns[-1]
    assert marker <= rec.end_ns < marker + 200_000_000
    assert row["last_token_ns"] <= rec.end_ns
    assert took < stream.END_GRACE_S + 1.5 < STALL_S


def _watch_reads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each read of a stream as it stands (``Conn._ended_at_last_event``) found, in
    a list that grows as the reads come."""
    looks: list[bool] = []
    real = stream.Conn._ended_at_last_event

    def look(conn: stream.Conn) -> bool:
        looks.append(real(conn))
        return looks[-1]

    monkeypatch.setattr(stream.Conn, "_ended_at_last_event", look)
    return looks


APIS = list(apis.APIS)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api", APIS)
async def test_an_end_marker_then_a_hang_ends_at_the_marker(api: str) -> None:
    evs, end = _answer(api)
    srv = Server([[*evs, b"MARK" + end]])
    [(rec, row, took)] = await _send(srv, api)
    _ok_at_the_marker(srv, rec, row, took)
    assert srv.connections == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api", APIS)
async def test_pings_after_the_end_marker_do_not_hold_the_request(api: str) -> None:
    """``: ping`` comments every 0.2 s after the marker (each read resets the stall
    timer): ended at the marker all the same, not at the request's timeout."""
    evs, end = _answer(api)
    srv = Server([[*evs, b"MARK" + end, PINGS]])
    [(rec, row, took)] = await _send(srv, api)
    _ok_at_the_marker(srv, rec, row, took)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_marker_cut_between_two_reads_is_found(api: str) -> None:
    """The last event's chunk written in two pieces cut inside its marker bytes, more than
    a look of the timer apart (two reads, looked in apart): found all the same, the end
    stamped with the second read, before the stall timeout."""
    evs, end = _answer(api)
    raw = _chunk(end)
    mark = apis.END_MARKS[api][0]
    cut = raw.rindex(mark) + 3
    srv = Server([[*evs, bytearray(raw[:cut]), stream.END_GRACE_S * 1.2,
                   bytearray(b"MARK" + raw[cut:])]])
    [(rec, row, took)] = await _send(srv, api)
    _ok_at_the_marker(srv, rec, row, took)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("apart", [0.0, stream.END_GRACE_S * 1.2], ids=["together", "apart"])
@pytest.mark.parametrize("api", APIS)
async def test_a_marker_cut_between_two_http_chunks_is_found(api: str, apart: float) -> None:
    """The last event sent as two HTTP chunks cut inside its marker bytes (``data: [DO``,
    then ``NE]``), so the chunk framing lies between the marker's halves in the raw reads;
    one after the other, or more than a look of the timer apart: found all the same.
    Before, the request waited for the stall timeout."""
    await _marker_in_chunks(api, [3], apart)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("apart", [0.0, stream.END_GRACE_S * 1.2], ids=["together", "apart"])
@pytest.mark.parametrize("pieces", [3, 0], ids=["three", "a-byte-each"])
@pytest.mark.parametrize("api", APIS)
async def test_a_marker_cut_into_more_http_chunks_is_found(api: str, pieces: int,
                                                           apart: float) -> None:
    """The last event sent as several HTTP chunks cut inside its marker bytes (``data:
    [D``, ``ON``, ``E]``; or a chunk for each of its bytes), so the framing of two chunks
    lies between each piece and the next; the last piece more than a look of the timer
    after the others, or not: found all the same. Before, the framing around a piece
    that was neither the marker's start nor its end hid it, and a chat or completions
    request waited for the stall timeout (with pings after it, for its whole timeout)."""
    mark = apis.END_MARKS[api][0]
    await _marker_in_chunks(api, [2, 4] if pieces else list(range(1, len(mark))), apart)


async def _marker_in_chunks(api: str, cuts: list[int], apart: float) -> None:
    """The last event sent as HTTP chunks cut at ``cuts`` (offsets into its marker), the
    last chunk ``apart`` seconds after the others: the request ends at the marker."""
    evs, end = _answer(api)
    at = end.rindex(apis.END_MARKS[api][0])
    bounds = [0, *(at + c for c in cuts), len(end)]
    parts = [end[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    steps: list[Step] = [*evs, *parts[:-1], b"MARK" + parts[-1]]
    if apart:
        steps.insert(-1, apart)
    srv = Server([steps])
    [(rec, row, took)] = await _send(srv, api)
    _ok_at_the_marker(srv, rec, row, took)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("hang", [False, True], ids=["then-ends", "then-hangs"])
@pytest.mark.parametrize("api", APIS)
async def test_events_after_the_end_marker_are_not_counted(api: str, hang: bool) -> None:
    """One token, the marker, five more tokens (then the body's end, or nothing): one
    token event, the last token the one before the marker."""
    w = _wire(api)
    first, end = _answer(api, tokens=1)
    late = [w.token(f"late{i} ", False, COUNTS) for i in range(5)]
    srv = Server([[*first, b"MARK" + end, *late, *([] if hang else [END])]])
    [(rec, row, took)] = await _send(srv, api)
    assert row["status"] == "ok", (row["error_type"], row["error_message"])
    assert row["token_events"] == 1
    assert isinstance(row["token_event_ns"], list) and row["token_event_ns"][0] <= \
        srv.marker_ns[-1] + 200_000_000
    if hang:
        _ok_at_the_marker(srv, rec, row, took, tokens=1)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api", APIS)
async def test_a_marker_inside_a_tokens_text_ends_nothing(
        api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token whose text holds the marker's bytes (inside a JSON string), a pause longer
    than the grace, more tokens and the real end: the stream is read once, after the
    grace, and the request goes on: not cut, every token counted, ended by the body's
    end."""
    looks = _watch_reads(monkeypatch)
    w = _wire(api)
    evs, end = _answer(api)
    fake = w.end_in_text()
    assert any(m in fake for m in apis.END_MARKS[api])
    pause = stream.END_GRACE_S * 2
    srv = Server([[*evs[:-1], fake, pause, w.token("after ", False, COUNTS), evs[-1], end,
                   0.05, END]])
    [(rec, row, took)] = await _send(srv, api)
    assert row["status"] == "ok", (row["error_type"], row["error_message"])
    assert row["token_events"] == 5
    assert took > pause
    assert looks == [False]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cut", ["whole", "in-its-word", "a-byte-each", "spaced"])
@pytest.mark.parametrize("api", APIS)
async def test_an_error_event_a_quiet_stream_ends_at_however_cut(api: str, cut: str) -> None:
    """Two tokens, then an error event (whole; as HTTP chunks cut inside the word
    ``error``; a chunk a byte; chat's ``{ "error"`` spaced), then the body neither ends nor
    closes: the stream, quiet, is read, and the request ends before the stall timeout
    (it waited for it, 5 s here, 120 s by default), the server's ``stream_error`` stamped
    at the event's read."""
    w = _wire(api)
    evs, _ = _answer(api)
    err = w.error("engine died")
    if cut == "spaced":
        if api not in ("chat", "completions"):
            pytest.skip("a typed stream's error is told by its type, not its spacing")
        err = err.replace(b'{"error"', b'{ "error"')
    at = err.index(b"error") + 2
    parts = {"whole": [err], "in-its-word": [err[:at], err[at:]], "spaced": [err],
             "a-byte-each": [err[k:k + 1] for k in range(len(err))]}[cut]
    srv = Server([[*evs[:-2], *parts[:-1], b"MARK" + parts[-1]]])
    [(rec, row, took)] = await _send(srv, api)
    assert row["status"] == "error" and row["error_type"] == "stream_error", row
    assert "engine died" in str(row["error_message"])
    assert "then" not in str(row["error_message"])  # no cut: the server's word alone
    assert isinstance(rec.end_ns, int)
    assert srv.marker_ns[-1] <= rec.end_ns < srv.marker_ns[-1] + 200_000_000
    assert took < 2 * stream.END_GRACE_S + 1.0 < STALL_S


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_slow_stream_is_not_read_at_each_quiet_spell(
        api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens further apart than the grace (an overloaded server): a quiet stream is read
    only when its reads since the last spell hold an error's bytes, not at each spell (a
    stream read whole once a token costs its square)."""
    looks = _watch_reads(monkeypatch)
    w = _wire(api)
    evs, end = _answer(api, tokens=4)
    gap = stream.END_GRACE_S * 1.5
    steps: list[Step] = [x for ev in evs for x in (ev, gap)]
    srv = Server([[*steps, end, END]])
    [(rec, row, took)] = await _send(srv, api)
    assert row["status"] == "ok" and row["token_events"] == 4
    assert took > 4 * gap and looks == []
    # a token that says "error" has the stream read at the spell after it: once
    said = w.token("an error ", False, COUNTS)
    srv = Server([[*evs[:-1], said, gap, evs[-1], end, END]])
    looks.clear()
    [(rec, row, took)] = await _send(srv, api)
    assert row["status"] == "ok" and row["token_events"] == 5 and looks == [False]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api", APIS)
async def test_a_server_that_ends_its_body_keeps_its_connection(api: str) -> None:
    """The last chunk with the marker, or 50 ms after it (well within the grace): the
    same connection serves the next request, and the request ends at the body's end."""
    evs, end = _answer(api)
    srv = Server([[*evs, end, END], [*evs, end, 0.05, END], [*evs, end, END]])
    got = await _send(srv, api, requests=3)
    assert srv.connections == 1
    for _, row, took in got:
        assert row["status"] == "ok" and row["token_events"] == 3
        assert took < stream.END_GRACE_S


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api", ["chat", "messages"])
async def test_a_connection_whose_body_never_ended_is_not_used_again(api: str) -> None:
    evs, end = _answer(api)
    srv = Server([[*evs, b"MARK" + end], [*evs, end, END]])
    got = await _send(srv, api, requests=2)
    assert [row["status"] for _, row, _ in got] == ["ok", "ok"]
    assert srv.connections == 2


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["response.incomplete", "response.failed"])
async def test_responses_other_terminal_events_end_it_too(kind: str) -> None:
    """``response.incomplete`` (a success at the output limit) and ``response.failed``
    (the request's error) end a Responses stream as ``response.completed`` does."""
    evs, end = _answer("responses")
    last = end.replace(b"response.completed", kind.encode())
    srv = Server([[*evs, b"MARK" + last]])
    [(rec, row, took)] = await _send(srv, "responses")
    assert took < stream.END_GRACE_S + 1.5
    if kind == "response.failed":
        assert row["status"] == "error" and row["error_type"] == "stream_error"
    else:
        _ok_at_the_marker(srv, rec, row, took)


@pytest.mark.parametrize("api", APIS)
def test_the_readers_stop_at_the_last_event(api: str) -> None:
    """Read as a finished stream: the events after the last one (tokens, a ping, an event
    cut short) are not read, and ``end_ns`` is the last event's read; a stream without
    one has none."""
    w = _wire(api)
    evs, end = _answer(api)
    late = [w.token("late ", False, COUNTS), PING, b'data: {"cut']
    chunks = [*evs, end, *late]
    times = [10 * (i + 1) for i in range(len(chunks))]
    st = apis.read_stream(api, chunks, times)
    assert st.done and st.error_type is None
    assert len(st.token_event_ns) == 3 and st.end_ns == times[len(evs)]
    whole = apis.read_stream(api, [*evs, end], times[:len(evs) + 1])
    assert whole.end_ns == times[len(evs)] and len(whole.token_event_ns) == 3
    assert apis.read_stream(api, evs, times[:len(evs)]).end_ns is None
