"""A server that dies for good: once an endpoint's connections have failed for
``reconnect_s`` with no answer, it is given up (a circuit breaker, ``replay/retry.py``);
with no endpoint left the run stops and run.json says why, instead of each remaining
request waiting out ``reconnect_s`` in turn. With another endpoint alive, routing passes
over the dead one and the run goes on."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from agentbench.replay import run_scenario
from agentbench.replay.endpoints import LiveEndpoint, Router
from agentbench.results import schema as records
from agentbench.testing.fakeserver import FakeServer, ServerConfig
from agentbench.traces.model import Session, Trace, Turn
from tests.helpers import openai_scenario

RECONNECT_S = 1.0
BUDGET = 60


def trace(sessions: int = 4, turns: int = 8) -> Trace:
    def turn(k: int) -> Turn:
        return Turn(turn=k, t=float(k), think_s=0.0, api_s=None, input_tokens=40 + 16 * k,
                    output_tokens=4, hash_ids=np.arange(1, k + 3, dtype=np.int64),
                    block_size=16)

    return Trace([Session(f"s{i}", None, "root", None, None, None, "test", "x", 0.0,
                          [turn(k) for k in range(turns)]) for i in range(sessions)])


def scenario(urls: list[str], out: Any, routing: str = "round_robin") -> Any:
    return openai_scenario(urls, out, concurrency=4, routing=routing,
                           endpoint={"reconnect_s": RECONNECT_S, "timeout_s": 10,
                                     "stall_timeout_s": 5},
                           limits={"max_requests": BUDGET, "recycle": True})


async def kill_after(srv: FakeServer, n: int, killed: list[float]) -> None:
    """Stop ``srv`` for good once it has received ``n`` streamed requests."""
    while len(srv.received) < n:
        await asyncio.sleep(0.002)
    killed.append(time.perf_counter())
    await srv.close()


def read(run_dir: Any) -> tuple[Any, dict[str, Any]]:
    req = pq.read_table(run_dir / records.REQUESTS_FILE).to_pandas()
    return req, json.loads((run_dir / records.RUN_FILE).read_text())


@pytest.mark.timeout(60)
async def test_a_server_that_dies_for_good_stops_the_run_within_reconnect_s(tmp_path):  # type: ignore[no-untyped-def]
    """60 requests on 4 lanes, the server gone for good after 12: the run ends about
    reconnect_s after the first refused connection (it used to take ~10 s per remaining
    request and lane: each waited out the backoff, then reconnect_s, in turn). Worker
    processes: ``tests/faults/test_faults_dead_server.py`` (a forked worker would keep
    this in-process server's listening socket open)."""
    srv = FakeServer(ServerConfig())
    await srv.start()
    killed: list[float] = []
    killer = asyncio.ensure_future(kill_after(srv, 12, killed))
    try:
        res = await asyncio.wait_for(
            run_scenario(scenario([srv.url], tmp_path), trace=trace(), progress=False), 20)
    finally:
        killer.cancel()
        await srv.close()
    ended = time.perf_counter()
    assert killed, "the server was never stopped"
    # refused from the kill on: backoff 0.05 s doubling, given up at the first refusal
    # reconnect_s after the first, plus scheduling slack
    print(f"run ended {ended - killed[0]:.2f} s after the server stopped")
    assert ended - killed[0] < RECONNECT_S + 1.5
    req, run = read(res.run_dir)
    refused = req[req.error_type == "connect_error"]
    reached = req[req.error_type != "connect_error"]
    # every request the server saw has its row; a connection it accepted but did not
    # read before it stopped is a row too (disconnected): at most one per lane
    assert 0 <= len(reached) - len(srv.received) <= 4
    assert (refused.status == records.ERROR).all() and len(refused) >= 1
    assert len(refused) <= 4 * 8  # a handful of tries per lane, no spinning
    assert (reached.status == records.OK).sum() >= 12
    assert len(reached) < BUDGET  # the run stopped before its budget was spent
    assert run["status"] == "completed"
    label = run["endpoints"][0]["label"]
    assert "unreachable" in run["stopped_reason"] and label in run["stopped_reason"]
    assert "the run stopped" in run["stopped_reason"]
    [gone] = run["endpoints_unreachable"]
    assert gone["endpoint"] == label
    assert gone["given_up_ns"] - gone["since_ns"] >= RECONNECT_S * 1e9
    # no request was sent after the endpoint was given up
    assert req.sent_ns.max() <= gone["given_up_ns"]


@pytest.mark.timeout(60)
async def test_a_dead_endpoint_is_passed_over_while_another_is_alive(tmp_path):  # type: ignore[no-untyped-def]
    """Two endpoints, round robin; one stops for good: it is given up after reconnect_s
    and every later request goes to the other, so the run spends its budget there
    (it used to send every other request to the dead one, each waiting ~10 s)."""
    live, dying = FakeServer(ServerConfig()), FakeServer(ServerConfig())
    await live.start()
    await dying.start()
    killed: list[float] = []
    killer = asyncio.ensure_future(kill_after(dying, 6, killed))
    try:
        res = await asyncio.wait_for(run_scenario(
            scenario([live.url, dying.url], tmp_path), trace=trace(), progress=False), 20)
    finally:
        killer.cancel()
        await live.close()
        await dying.close()
    req, run = read(res.run_dir)
    assert "stopped_reason" not in run
    [gone] = run["endpoints_unreachable"]
    assert gone["endpoint"] == "ep1"
    after = req[req.sent_ns > gone["given_up_ns"]]
    assert len(after) > 0 and (after.endpoint == "ep0").all()
    assert (after.status == records.OK).all()
    failed_turns = req[(req.endpoint == "ep1") & (req.status != records.OK)]
    # the budget went to requests that were sent: each failed turn on ep1 counts once
    assert len(live.received) + len(dying.received) >= BUDGET - 4 - len(failed_turns)
    assert (req[req.endpoint == "ep0"].status == records.OK).all()


@pytest.mark.parametrize("policy", ["round_robin", "least_loaded", "random",
                                    "session_affinity"])
def test_routing_passes_over_a_dead_endpoint(policy: str) -> None:
    eps = [LiveEndpoint(transport=None) for _ in range(3)]  # type: ignore[arg-type]
    router = Router(policy, eps, seed=1)
    before = [router.pick(1) for _ in range(30)]
    assert 1 in before
    eps[1].dead_ns = 5
    after = [router.pick(1) for _ in range(30)]
    assert 1 not in after and set(after) <= {0, 2}
    eps[0].dead_ns = eps[2].dead_ns = 5  # none alive: the pick stands (the run stops)
    assert router.pick(1) in (0, 1, 2)


@pytest.mark.timeout(60)
async def test_a_stage_that_ends_during_a_connection_backoff_sends_nothing_more(tmp_path):  # type: ignore[no-untyped-def]
    """The server gone after 8 requests, a 2 s stage, reconnect_s far longer: the stage
    ends while the lanes wait out the endpoint's connection backoff. A turn waiting there
    before its first attempt was sent at the stop all the same, stamped as scheduled at
    the backoff's end, later than it was sent (a schedule lag of -576 ms in a run against
    serve-sim killed mid-run)."""
    srv = FakeServer(ServerConfig())
    await srv.start()
    killer = asyncio.ensure_future(kill_after(srv, 8, []))
    sc = openai_scenario([srv.url], tmp_path, concurrency=4,
                         endpoint={"reconnect_s": 30, "timeout_s": 10, "stall_timeout_s": 5},
                         limits={"duration_s": 2.0, "recycle": True},
                         timing={"time_scale": 1.0})
    thinking = trace()  # a lane that thinks starts its next turn inside the backoff
    for sess in thinking.sessions:
        for t in sess.turns:
            t.think_s = 1.5 if sess.session_id == "s3" else 0.07
    try:
        res = await asyncio.wait_for(run_scenario(sc, trace=thinking, progress=False), 30)
    finally:
        killer.cancel()
        await srv.close()
    req, run = read(res.run_dir)
    refused = req[req.error_type == "connect_error"]
    assert len(refused) >= 4 and (req.status == records.OK).sum() >= 8
    early = req[req.sent_ns < req.scheduled_ns]
    assert early.empty, early[["lane", "scheduled_ns", "sent_ns", "error_type"]]
    stop = run["stages"][0]["end_ns"]
    # nothing went out in the stage's last 10 ms, when it stopped inside a 1.6 s backoff
    assert (req.sent_ns < stop - 10_000_000).all(), (req.sent_ns.max(), stop)
