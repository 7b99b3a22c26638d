"""Failures are data: HTTP 500 and 429, a refused connection, a reset mid-stream, a stall
past the timeout, malformed SSE, an error event and a stream without [DONE] each become a
request record with the error, and the run goes on to the end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from agentbench.errors import InputError
from agentbench.replay import run_scenario
from agentbench.results import schema as records
from agentbench.scenario.model import Scenario
from agentbench.testing.fakeserver import FakeServer, ServerConfig
from agentbench.traces.model import Session, Trace, Turn
from tests.helpers import free_port, openai_scenario, served

FAULT_TYPES = {
    "http500": "http_500",
    "http429": "http_429",
    "reset": "disconnected",
    "stall": "stall_timeout",
    "malformed": "malformed_sse",
    "error_event": "stream_error",
    "no_done": "incomplete_stream",
}


def trace(turns: int) -> Trace:
    ts = [Turn(turn=k, t=float(k), think_s=0.0, api_s=None, input_tokens=40 + 16 * k,
               output_tokens=10, hash_ids=np.arange(1, k + 3, dtype=np.int64), block_size=16)
          for k in range(turns)]
    return Trace([Session("s", None, "root", None, None, None, "test", "x", 0.0, ts)])


def scenario(url: str, out: Any, stall_s: float = 0.3, preflight: bool = True,
             reconnect_s: float = 0.0) -> Scenario:
    """One lane against ``url``: a stall after ``stall_s``, a 10 s timeout."""
    return openai_scenario(url, out, name="faults", named=False, endpoint={
        "stall_timeout_s": stall_s, "timeout_s": 10, "preflight": preflight,
        "reconnect_s": reconnect_s})


@pytest.mark.timeout(60)
async def test_each_fault_is_a_record_and_the_run_goes_on(tmp_path):  # type: ignore[no-untyped-def]
    faults = list(FAULT_TYPES)
    streamed = iter(range(1000))

    def fault(n: int, body: dict[str, Any]) -> str | None:
        # streamed request k gets fault k (k < 7), then three clean ones; the start-up
        # probes (not streamed) are answered normally
        if not body.get("stream"):
            return None
        k = next(streamed)
        return faults[k] if k < len(faults) else None

    cfg = ServerConfig(ttft_s=0.0, itl_s=0.001, stall_s=2.0, fault=fault)
    srv = FakeServer(cfg)
    await srv.start()
    try:
        res = await asyncio.wait_for(
            run_scenario(scenario(srv.url, tmp_path), trace=trace(10), progress=False), 50)
    finally:
        await srv.close()
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    req = req.sort_values("turn")
    assert len(req) == 10
    got = dict(zip(req.turn[:7], req.error_type[:7], strict=True))
    assert got == dict(enumerate(FAULT_TYPES.values()))
    assert (req.status[:7] == records.ERROR).all()
    assert (req.status[7:] == records.OK).all()
    assert req.error_message[:7].str.len().gt(0).all()
    assert (req.end_ns >= req.sent_ns).all()
    # the reset and the stall happened after some tokens arrived: those are kept
    by = req.set_index("error_type")
    assert by.loc["disconnected", "token_events"] >= 4
    assert by.loc["stall_timeout", "token_events"] >= 4
    stall = by.loc["stall_timeout"]
    assert 0.3e9 <= stall.end_ns - stall.last_token_ns < 2e9
    assert by.loc["http_429", "http_status"] == 429
    run = (res.run_dir / records.RUN_FILE).read_text()
    assert '"status": "completed"' in run


@pytest.mark.timeout(60)
async def test_connection_refused(tmp_path):  # type: ignore[no-untyped-def]
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # without the preflight check (and with one try per request, reconnect_s: 0) every
    # request becomes a record with the error
    res = await asyncio.wait_for(run_scenario(
        scenario(f"http://127.0.0.1:{port}", tmp_path, preflight=False), trace=trace(3),
        progress=False), 50)
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    assert len(req) == 3
    assert (req.error_type == "connect_error").all()
    assert req.http_status.isna().all()
    ses = pq.read_table(res.run_dir / records.SESSIONS_FILE).to_pandas()
    assert list(ses.status) == [records.ERROR]
    # with it (the default), the run stops at once with a one-line error naming the endpoint
    with pytest.raises(InputError, match=r"endpoints\[0\].*cannot reach"):
        await asyncio.wait_for(run_scenario(
            scenario(f"http://127.0.0.1:{port}", tmp_path / "b"), trace=trace(3),
            progress=False), 50)
    assert not (tmp_path / "b" / "run").exists()  # nothing ran: no empty run folder left


@pytest.mark.timeout(60)
async def test_a_server_that_never_answers_is_named_so(tmp_path):  # type: ignore[no-untyped-def]
    """A port that takes connections and never answers (a server still loading, a wedged
    process): the pre-run check said only "cannot reach URL: TimeoutError", after 63 s
    whatever ``timeout_s`` said. It waits at most the endpoint's ``timeout_s`` and says
    what happened and how to skip the check."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # connections complete in the kernel's backlog; nothing reads them
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        sc = openai_scenario(url, tmp_path, endpoint={"timeout_s": 1})
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(InputError) as got:
            await asyncio.wait_for(run_scenario(sc, trace=trace(3), progress=False), 30)
        took = asyncio.get_running_loop().time() - t0
    line = str(got.value)
    assert "no answer to a 1-token request within 1 s" in line, line
    assert "preflight: false" in line and "\n" not in line
    assert took < 10


@pytest.mark.timeout(60)
async def test_a_server_whose_answer_stops_after_its_head_is_named_so(tmp_path):  # type: ignore[no-untyped-def]
    """The head came (HTTP 500), its body did not: the line says so rather than "no
    answer"."""
    done = asyncio.Event()

    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100\r\n\r\n")
        await writer.drain()
        await done.wait()
        writer.close()

    srv = await asyncio.start_server(half, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    try:
        with pytest.raises(InputError) as got:
            await asyncio.wait_for(run_scenario(
                openai_scenario(url, tmp_path, endpoint={"timeout_s": 1}), trace=trace(3),
                progress=False), 30)
    finally:
        done.set()
        srv.close()
        await asyncio.sleep(0)
    assert "HTTP 500, then not its whole body within 1 s" in str(got.value), got.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize("status", [None, 401, 404])
async def test_the_pre_run_check_never_shows_a_url_query_value(tmp_path, status):  # type: ignore[no-untyped-def]
    """An endpoint unreachable, or refusing the key or the model: the one-line error names
    the URL with its query values (an ``api-key``) redacted."""
    from aiohttp import web

    async def refuse(_request: web.Request) -> web.Response:
        # and a body with a terminal escape (a window title) and line breaks, which once
        # reached the terminal as they were
        return web.Response(status=status or 500,
                            text="no such \x1b]0;pwned\x07thing\nline2\rline3")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    async with contextlib.AsyncExitStack() as stack:
        # nothing listens at the free port; a server that refuses at the other
        url = f"http://127.0.0.1:{free_port()}" if status is None else \
            await stack.enter_async_context(served(app))
        with pytest.raises(InputError) as err:
            await asyncio.wait_for(run_scenario(
                scenario(f"{url}/v1?api-key=QSECRET99", tmp_path), trace=trace(3),
                progress=False), 50)
    text = str(err.value)
    assert url.removeprefix("http://") in text and "<redacted>" in text
    assert "QSECRET99" not in text
    assert text.isprintable(), text
    if status is not None:
        assert "no such \\x1b]0;pwned\\x07thing line2 line3" in text, text


@pytest.mark.timeout(60)
async def test_retry_honours_retry_after_and_records_each_attempt(tmp_path):  # type: ignore[no-untyped-def]
    """Two 429s (Retry-After 0.2 s), then success: three rows for the turn, the retry sent
    no earlier than the server asked."""
    streamed = iter(range(1000))

    def fault(n: int, body: dict[str, Any]) -> str | None:
        return "http429" if body.get("stream") and next(streamed) < 2 else None

    srv = FakeServer(ServerConfig(fault=fault, retry_after_s=0.2))
    await srv.start()
    try:
        sc = scenario(srv.url, tmp_path)
        sc.endpoints[0].retry.max_attempts = 3
        res = await asyncio.wait_for(run_scenario(sc, trace=trace(2), progress=False), 50)
    finally:
        await srv.close()
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas().sort_values("sent_ns")
    assert list(req.turn) == [0, 0, 0, 1]
    assert list(req.status) == [records.ERROR, records.ERROR, records.OK, records.OK]
    gaps = np.diff(req.sent_ns.to_numpy()[:3]) / 1e9
    assert (gaps >= 0.2).all() and (gaps < 1.0).all()
    # the session counts the retried turn once, by its last attempt
    ses = pq.read_table(res.run_dir / records.SESSIONS_FILE).to_pandas()
    assert list(ses.status) == [records.OK] and list(ses.turns_done) == [2]


@pytest.mark.timeout(60)
async def test_connection_errors_back_off_instead_of_spinning(tmp_path):  # type: ignore[no-untyped-def]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sc = scenario(f"http://127.0.0.1:{port}", tmp_path, preflight=False)
    res = await asyncio.wait_for(run_scenario(sc, trace=trace(6), progress=False), 50)
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas().sort_values("sent_ns")
    assert (req.error_type == "connect_error").all()
    gaps = np.diff(req.sent_ns.to_numpy()) / 1e9
    # 0.05, 0.1, 0.2, 0.4, 0.8 s: each wait at least doubles
    assert (gaps[1:] >= 1.8 * gaps[:-1]).all() and gaps[0] >= 0.05


@pytest.mark.timeout(60)
async def test_a_server_that_comes_back_does_not_use_up_the_request_budget(tmp_path):  # type: ignore[no-untyped-def]
    """Down for the first ~0.8 s, then up: the refused tries are rows (connect_error), and
    the budget of 4 requests still buys 4 requests that reached the server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sc = scenario(f"http://127.0.0.1:{port}", tmp_path, preflight=False, reconnect_s=30)
    sc.limits.max_requests = 4
    srv = FakeServer(ServerConfig())

    async def come_back() -> None:
        await asyncio.sleep(0.8)
        await srv.start(port=port)

    up = asyncio.ensure_future(come_back())
    try:
        res = await asyncio.wait_for(run_scenario(sc, trace=trace(6), progress=False), 50)
    finally:
        await up
        await srv.close()
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    refused = req[req.error_type == "connect_error"]
    assert 2 <= len(refused) <= 8  # 0.05, 0.1, 0.2, 0.4 s backoff: a handful, no spinning
    assert (req.status == records.OK).sum() == 4 == len(srv.received)
    assert len(req) == len(refused) + len(srv.received)
    # each refused try is a row, but the session counts each turn once and ends ok
    ses = pq.read_table(res.run_dir / records.SESSIONS_FILE).to_pandas()
    assert list(ses.status) == ["incomplete"] and list(ses.turns_done) == [4]


def _down_and_up(out: Any, port: int, up_url: str, reconnect_s: float
                 ) -> tuple[Scenario, Trace]:
    """Two lanes on endpoints ep0 (``port``, nothing listening yet) and ep1 (``up_url``),
    a budget of 4 requests, and a trace of two six-turn trees: one tree per endpoint."""
    sc = openai_scenario([f"http://127.0.0.1:{port}", up_url], out, concurrency=2,
                         endpoint={"preflight": False, "reconnect_s": reconnect_s,
                                   "timeout_s": 10})
    sc.limits.max_requests = 4
    two = Trace([Session(f"s{i}", None, "root", None, None, None, "test", "x", 0.0,
                         trace(6).sessions[0].turns) for i in range(2)])
    return sc, two


@pytest.mark.timeout(90)
@pytest.mark.parametrize("workers", [1, 2])
async def test_a_request_waiting_to_reconnect_keeps_its_budget_when_others_spend_the_rest(
        tmp_path, workers):  # type: ignore[no-untyped-def]
    """Two lanes, one tree each, on two endpoints: the first endpoint is down at first,
    the second answers at once and its lane takes the rest of the budget meanwhile. The
    first lane's request, refused and waiting to reconnect, holds one unit of the budget:
    it goes on trying when the budget is spent, so the budget of 4 still buys 4 requests
    that reached a server (it used to end as a refused row, spending the unit). With two
    worker processes the lanes are in different processes. The first endpoint comes up
    once the second has had its 3 (then 0.5 s more): worker processes on a busy core can
    take longer to start than any fixed time, and all lanes start together."""
    async def after(up: FakeServer) -> None:
        while len(up.received) < 3:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)

    await _budget_holds_across_a_reconnect(tmp_path, after, 30, 70, workers=workers)


async def _budget_holds_across_a_reconnect(out: Any, after: Any, reconnect_s: float,
                                           limit_s: float, **run_kw: Any) -> Any:
    """``_down_and_up`` with ep0 started once ``await after(up)`` returns (``up``: ep1's
    server), run with ``run_kw`` within ``limit_s``: the budget of 4 buys 4 requests that
    reached a server, 3 on ep1 and 1 on ep0, besides ep0's refused rows. Returns the run."""
    port = free_port()
    up = FakeServer(ServerConfig())
    await up.start()
    back = FakeServer(ServerConfig())
    sc, two = _down_and_up(out, port, up.url, reconnect_s=reconnect_s)

    async def come_back() -> None:
        await after(up)
        await back.start(port=port)

    later = asyncio.ensure_future(come_back())
    try:
        res = await asyncio.wait_for(run_scenario(sc, trace=two, progress=False, **run_kw),
                                     limit_s)
    finally:
        await later
        await back.close()
        await up.close()
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    refused = req[req.error_type == "connect_error"]
    assert len(refused) >= 1 and set(refused.endpoint) == {"ep0"}
    assert len(up.received) == 3 and len(back.received) == 1  # the budget: 4 that arrived
    assert (req.status == records.OK).sum() == 4 and len(req) == len(refused) + 4
    return res


@pytest.mark.timeout(60)
async def test_a_turn_waiting_out_a_backoff_still_waits_when_the_budget_runs_out(
        tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """ep0 refuses until 2.5 s, ep1 and ep2 answer in 0.33 s; five three-turn trees on
    three lanes, sticky to ep0, ep1, ep2, ep0, ep1. Tree 0's lane keeps reconnecting to ep0
    (backoff 0.05 s doubling: ep0 is blocked from 0.75 s to 1.55 s). At about 1 s trees 1
    and 2 end and their lanes draw trees 3 (ep0) and 4: tree 3's first turn takes a unit of
    the budget and waits for ep0's backoff to end; at about 1.33 s tree 4's second turn takes
    the budget's last unit. Tree 3's turn holds its unit, as a request waiting to reconnect
    does, so it still waits out the backoff: it used to be sent at once, to an endpoint in
    backoff, when the budget's end woke every waiting turn."""
    from agentbench.replay.context import RunContext

    stops: list[tuple[int, int]] = []
    stop_for_budget = RunContext.stop_for_budget

    def stop(self: RunContext) -> None:  # when the budget ran out, and ep0's backoff then
        stops.append((self.timers.now_ns(), self.endpoints[0].blocked_until_ns))
        stop_for_budget(self)

    monkeypatch.setattr(RunContext, "stop_for_budget", stop)
    port = free_port()
    ups = [FakeServer(ServerConfig(ttft_s=0.33)) for _ in range(2)]
    for up in ups:
        await up.start()
    back = FakeServer(ServerConfig())
    sc = openai_scenario([f"http://127.0.0.1:{port}", ups[0].url, ups[1].url], tmp_path,
                         concurrency=3, endpoint={"preflight": False, "reconnect_s": 30,
                                                  "timeout_s": 10})
    sc.limits.max_requests = 1 + 3 + 3 + 1 + 2  # trees 0 to 4 as above
    five = Trace([Session(f"s{i}", None, "root", None, None, None, "test", "x", 0.0,
                          trace(3).sessions[0].turns) for i in range(5)])

    async def come_back() -> None:
        await asyncio.sleep(2.5)
        await back.start(port=port)

    later = asyncio.ensure_future(come_back())
    try:
        res = await asyncio.wait_for(run_scenario(sc, trace=five, progress=False), 40)
    finally:
        await later
        await back.close()
        for up in ups:
            await up.close()
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    t_stop, blocked = stops[0]
    assert blocked > t_stop  # ep0 was in backoff when the budget ran out
    three = req[(req.session_id == "s3") & (req.endpoint == "ep0")].sent_ns.min()
    assert three > t_stop  # tree 3's first turn was waiting then (the case under test)
    assert three >= blocked, (three - blocked) / 1e9  # and it waited out the backoff
    assert (req.status == records.OK).sum() == 10  # the budget: 10 that reached a server


@pytest.mark.timeout(60)
async def test_the_deadline_still_ends_a_reconnect_the_spent_budget_let_go_on(
        tmp_path):  # type: ignore[no-untyped-def]
    """As above, but the first endpoint never comes back: its request, kept trying when the
    budget was spent, ends at the stage's deadline (1.5 s), not after reconnect_s (20 s)."""
    import time

    up = FakeServer(ServerConfig())
    await up.start()
    sc, two = _down_and_up(tmp_path, free_port(), up.url, reconnect_s=20)
    sc.limits.duration_s = 1.5
    t0 = time.monotonic()
    try:
        res = await asyncio.wait_for(run_scenario(sc, trace=two, progress=False), 50)
    finally:
        await up.close()
    took = time.monotonic() - t0
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    refused = req[req.error_type == "connect_error"]
    assert took < 10, took  # reconnect_s would be 20 s
    assert len(refused) >= 1 and set(refused.endpoint) == {"ep0"}
    assert len(up.received) == 3 and (req.status == records.OK).sum() == 3


@pytest.mark.timeout(60)
async def test_follow_redirects_stays_within_the_origin(tmp_path):  # type: ignore[no-untyped-def]
    """Off (the default): a 307 is an error naming the Location. On: a 307 within the
    server is followed (one row, the request sent again there); one to another origin is
    still an error, and nothing is sent there."""
    from agentbench.testing.fakeserver import REDIRECT_TO

    plan = {0: "redirect_here", 2: "redirect"}
    streamed = iter(range(1000))

    def fault(n: int, body: dict[str, Any]) -> str | None:
        return plan.get(next(streamed)) if body.get("stream") else None

    srv = FakeServer(ServerConfig(fault=fault))
    await srv.start()
    try:
        sc = scenario(srv.url, tmp_path)
        sc.endpoints[0].follow_redirects = True
        res = await asyncio.wait_for(run_scenario(sc, trace=trace(2), progress=False), 50)
        streamed = iter(range(1000))
        off = scenario(srv.url, tmp_path / "off")
        res_off = await asyncio.wait_for(run_scenario(off, trace=trace(1), progress=False),
                                         50)
    finally:
        await srv.close()
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas().sort_values("turn")
    # turn 0: redirected within the server and followed; turn 1: sent to another origin
    assert list(req.status) == [records.OK, records.ERROR]
    assert req.error_message.iloc[1].startswith(f"redirect to {REDIRECT_TO} not followed")
    assert [r.path for r in srv.received[:2]] == ["/v1/chat/completions"] * 2
    assert len(srv.received) == 3 + 1  # 3 with follow_redirects, 1 without
    row = pq.read_table(res_off.run_dir / records.REQUESTS_FILE).to_pandas().iloc[0]
    assert row.error_type == "http_307" and "follow_redirects" in row.error_message


@pytest.mark.timeout(60)
async def test_a_percent_encoded_url_password_is_sent_decoded_and_stored_nowhere(
        tmp_path: Any) -> None:
    """``http://us%40er:p%40ss...@host``: RFC 3986 user-info is percent-encoded, so the
    server gets Basic ``us@er:p@ss...`` (it got the encoded form); neither form reaches a
    file of the run."""
    import base64

    srv = FakeServer(ServerConfig())
    await srv.start()
    try:
        host = srv.url.removeprefix("http://")
        sc = scenario(f"http://us%40er:p%40ss-SECRET-4321@{host}", tmp_path)
        sc.limits.max_requests = 2
        res = await asyncio.wait_for(run_scenario(sc, trace=trace(3), progress=False), 50)
    finally:
        await srv.close()
    want = "Basic " + base64.b64encode(b"us@er:p@ss-SECRET-4321").decode()
    assert srv.received and {r.headers.get("Authorization") for r in srv.received} == {want}
    for f in res.run_dir.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            for form in (b"p@ss-SECRET-4321", b"p%40ss-SECRET-4321", want[6:].encode()):
                assert form not in data, (f, form)


async def _past_two_connections(tmp_path: Path, on_deadline: str) -> tuple[Any, Any, Any]:
    """An open loop far past the client's connections (2 connections, 0.2 s a request,
    200 arrivals a second for 0.5 s, ``on_deadline`` as given): the server, the run and
    its requests table."""
    srv = FakeServer(ServerConfig(ttft_s=0.2, itl_s=0.0))
    await srv.start()
    sessions = [Session(f"s{i}", None, "root", None, None, None, "test", "x", 0.0,
                        trace(1).sessions[0].turns) for i in range(20)]
    sc = openai_scenario(srv.url, tmp_path, endpoint={"max_connections": 2},
                         load={"kind": "rate", "arrival": "constant", "rate_per_s": 200},
                         limits={"duration_s": 0.5, "on_deadline": on_deadline,
                                 "recycle": True})
    try:
        res = await asyncio.wait_for(run_scenario(sc, trace=Trace(sessions),
                                                  progress=False), 50)
    finally:
        await srv.close()
    return srv, res, pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()


@pytest.mark.timeout(60)
async def test_requests_waiting_for_a_connection_at_the_deadline_are_not_sent(tmp_path):  # type: ignore[no-untyped-def]
    """An open loop far past the client's connections (2 connections, 0.2 s a request,
    200 arrivals a second): at the deadline (0.5 s, ``on_deadline: finish``) most requests
    still wait in the client for a connection. They were sent after it, one connection
    at a time, as late traffic the deadline had ended (10 s here, 67 s in a review); now
    each is a cancelled row saying it was never sent, and the stage ends at once."""
    from agentbench.transport.http import NOT_SENT

    srv, res, req = await _past_two_connections(tmp_path, "finish")
    unsent = req[req.error_message == NOT_SENT]
    sent = len(srv.received)
    # what the two connections served by the deadline, and the two in flight then
    assert sent <= 2 * (0.5 / 0.2 + 2), sent
    assert len(unsent) >= 50 and len(req) == sent + len(unsent)
    assert (unsent.status == records.CANCELLED).all()
    # never sent: no send time (not the attempt's start), so no schedule lag of ~0 each
    assert unsent.sent_ns.isna().all() and unsent.end_ns.notna().all()
    assert req.sent_ns[req.error_message != NOT_SENT].notna().all()
    assert (req.status[req.error_message != NOT_SENT] == records.OK).all()
    stage = json.loads((res.run_dir / "run.json").read_text())["stages"][0]
    assert (stage["end_ns"] - stage["start_ns"]) / 1e9 < 2.0  # not the queue's 10 s


@pytest.mark.timeout(60)
async def test_requests_cancelled_while_waiting_for_a_connection_have_no_send_time(tmp_path):  # type: ignore[no-untyped-def]
    """The same open loop past 2 connections, cancelled at the deadline
    (``on_deadline: cancel``): a request still waiting for a connection then was never
    handed to the socket, so its row has no ``sent_ns`` (docs/architecture.md) and adds
    no schedule lag; the requests in flight keep theirs."""
    srv, res, req = await _past_two_connections(tmp_path, "cancel")
    cancelled = req[req.status == records.CANCELLED]
    waited = cancelled[cancelled.sent_ns.isna()]
    assert len(waited) >= 50, len(waited)  # most arrivals waited for one of 2 connections
    assert waited.end_ns.notna().all() and waited.scheduled_ns.notna().all()
    # those on a connection at the deadline had been handed over: they keep their send time
    assert len(cancelled) - len(waited) <= 2
    assert req.sent_ns[req.status == records.OK].notna().all()
    assert len(srv.received) == len(req) - len(waited)
