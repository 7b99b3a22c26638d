"""Replay modes against a real HTTP server: routing, recycling with per-copy salts, open
loop, sweeps, warmup, deadlines (finish / cancel), request budgets, the idle-gap cap,
server-metrics scraping and run.json (secrets redacted)."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from agentbench.replay import run_scenario
from agentbench.results import schema as records
from agentbench.scenario.model import Scenario
from agentbench.testing.fakeserver import FakeServer, ServerConfig
from agentbench.traces.model import Session, Trace, Turn
from tests.helpers import openai_scenario


def tiny_trace(roots: int = 4, turns: int = 4, think_s: float = 0.0, block: int = 16,
               out: int = 3) -> Trace:
    """Roots whose turn k re-sends turn k-1's blocks plus two new ones (+ a 5-token tail)."""
    sessions = []
    for r in range(roots):
        ts = []
        for k in range(turns):
            ids = np.arange(1, 2 * k + 3, dtype=np.int64) + 1000 * r
            ts.append(Turn(turn=k, t=float(k), think_s=think_s, api_s=0.5,
                           input_tokens=len(ids) * block + 5, output_tokens=out,
                           hash_ids=ids, block_size=block))
        sessions.append(Session(f"s{r}", None, "root", None, None, None, "test", "scope",
                                float(r), ts))
    return Trace(sessions, name="tiny")


#: these tests' scenario: 2 lanes, server metrics scraped every 0.1 s
scenario = functools.partial(openai_scenario, concurrency=2, server_metrics={"interval_s": 0.1})


def requests_of(run_dir: Path) -> Any:
    return pq.read_table(run_dir / records.REQUESTS_FILE).to_pandas()


async def _run(sc: Scenario, trace: Trace, timeout: float = 60) -> Path:
    res = await asyncio.wait_for(run_scenario(sc, trace=trace, progress=False), timeout)
    return res.run_dir


@pytest.mark.timeout(60)
@pytest.mark.parametrize("policy", ["round_robin", "session_affinity", "least_loaded",
                                    "random"])
async def test_routing(fake_servers, tmp_path, policy):  # type: ignore[no-untyped-def]
    # one lane: with two lanes in lockstep round robin would pair each lane with one endpoint
    sc = scenario([s.url for s in fake_servers], tmp_path, routing=policy,
                  load={"kind": "lanes", "concurrency": 1})
    req = requests_of(await _run(sc, tiny_trace()))
    assert len(req) == 16 and (req.status == "ok").all()
    per_tree = req.groupby("tree_id").endpoint.nunique()
    assert set(req.endpoint) == {"ep0", "ep1"}
    assert sum(len(s.received) for s in fake_servers) == 16
    if policy == "session_affinity":
        assert (per_tree == 1).all()
    if policy == "round_robin":
        assert (req.endpoint.value_counts() == 8).all()
        assert (per_tree == 2).all()


@pytest.mark.timeout(60)
async def test_recycled_copies_never_share_text(fake_servers, tmp_path):  # type: ignore[no-untyped-def]
    srv = fake_servers[0]
    sc = scenario([srv.url], tmp_path, limits={"max_sessions": 5, "recycle": True},
                  load={"kind": "lanes", "concurrency": 1})
    req = requests_of(await _run(sc, tiny_trace(roots=2)))
    assert sorted(set(req.tree_id)) == ["s0#0", "s0#1", "s0#2", "s1#0", "s1#1"]
    assert sorted(set(req["copy"])) == [0, 1, 2]
    ids = {r.request_id: (r.tree_id, r.turn) for r in req.itertuples()}
    texts = {ids[int(r.headers["X-Request-ID"])]: json.loads(r.body)["messages"][0]["content"]
             for r in srv.received}
    a, b = texts[("s0#0", 0)], texts[("s0#1", 0)]
    assert len(a) == len(b) and a[:80] != b[:80]  # same shape, different words
    assert texts[("s0#1", 1)].startswith(texts[("s0#1", 0)][:80])


@pytest.mark.timeout(60)
async def test_open_loop_poisson_sweep(fake_servers, tmp_path):  # type: ignore[no-untyped-def]
    sc = scenario([fake_servers[0].url], tmp_path,
                  load={"kind": "rate", "arrival": "poisson", "rate_per_s": [20.0, 40.0]},
                  limits={"max_sessions": 6, "recycle": True})
    req = requests_of(await _run(sc, tiny_trace(roots=3, turns=2)))
    assert sorted(set(req.stage)) == ["r=20", "r=40"]
    assert req.groupby("stage").tree_id.nunique().to_dict() == {"r=20": 6, "r=40": 6}
    # stages never share a trace copy
    copies = req.groupby("stage")["copy"].agg(set)
    assert not (copies["r=20"] & copies["r=40"])
    lag_ms = (req.sent_ns - req.scheduled_ns) / 1e6
    assert (lag_ms >= 0).all()
    run = json.loads((sc_dir := Path(tmp_path) / "run" / records.RUN_FILE).read_text())
    assert [s["label"] for s in run["stages"]] == ["r=20", "r=40"]
    assert sc_dir.exists()


@pytest.mark.timeout(60)
async def test_warmup_random_start(fake_servers, tmp_path):  # type: ignore[no-untyped-def]
    trace = tiny_trace(roots=4, turns=6)
    sc = scenario([fake_servers[0].url], tmp_path, warmup={"enabled": True},
                  load={"kind": "lanes", "concurrency": 2})
    req = requests_of(await _run(sc, trace))
    warm = req[req.phase == records.WARMUP]
    assert len(warm) == 2  # one per lane, in its first tree
    for w in warm.itertuples():
        tree = req[req.tree_id == w.tree_id]
        assert tree.turn.min() == w.turn  # the lane joined its first tree at this turn
        assert (tree[tree.turn > w.turn].phase == records.MEASURE).all()
    assert (req[~req.tree_id.isin(warm.tree_id)].groupby("tree_id").turn.min() == 0).all()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("on_deadline", ["finish", "cancel"])
async def test_deadline(tmp_path, on_deadline):  # type: ignore[no-untyped-def]
    srv = FakeServer(ServerConfig(ttft_s=0.05, itl_s=0.05))  # 20 tokens: ~1 s a request
    await srv.start()
    try:
        sc = scenario([srv.url], tmp_path, load={"kind": "lanes", "concurrency": 3},
                      limits={"duration_s": 0.5, "on_deadline": on_deadline, "recycle": True})
        run_dir = await _run(sc, tiny_trace(roots=3, out=20), timeout=30)
    finally:
        await srv.close()
    req = requests_of(run_dir)
    assert len(req) == 3  # the three first turns were in flight at the deadline
    if on_deadline == "finish":
        assert (req.status == "ok").all() and (req.completion_tokens == 20).all()
    else:
        assert (req.status == "cancelled").all()
        assert (req.end_ns < 0.9e9).all()
        assert (req.token_events < 20).all()
    ses = pq.read_table(run_dir / records.SESSIONS_FILE).to_pandas()
    assert len(ses) == 3
    assert set(ses.status) == ({"incomplete"} if on_deadline == "finish" else {"cancelled"})
    run = json.loads((run_dir / records.RUN_FILE).read_text())
    assert run["status"] == "completed" and run["end_wall"]


@pytest.mark.timeout(60)
async def test_request_budget_and_idle_cap(fake_servers, tmp_path):  # type: ignore[no-untyped-def]
    # think 30 s per turn, but the idle cap pulls timers in to 0.05 s when nothing is in
    # flight, so the run takes well under a second of waiting
    trace = tiny_trace(roots=2, turns=4, think_s=30.0)
    sc = scenario([fake_servers[0].url], tmp_path, limits={"max_requests": 5, "recycle": True},
                  timing={"time_scale": 1.0, "idle_cap_s": 0.05},
                  load={"kind": "lanes", "concurrency": 1})
    run_dir = await _run(sc, trace, timeout=30)
    req = requests_of(run_dir).sort_values("request_id")
    assert len(req) == 5
    gaps = (req.scheduled_ns.to_numpy()[1:] - req.end_ns.to_numpy()[:-1]) / 1e9
    assert (gaps < 0.5).all() and (gaps >= 0.04).all()
    run = json.loads((run_dir / records.RUN_FILE).read_text())
    assert run["idle_pulled_in_ns"] > 100e9


@pytest.mark.timeout(60)
async def test_run_json_metrics_and_secrets(fake_servers, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AB_TEST_KEY", "sk-very-secret-value")
    sc = scenario([fake_servers[0].url], tmp_path)
    sc.endpoints[0].api_key_env = "AB_TEST_KEY"
    sc.endpoints[0].headers = {"X-Api-Key": "sk-very-secret-value", "X-Team": "a"}
    run_dir = await _run(sc, tiny_trace())
    assert fake_servers[0].received[0].headers["Authorization"] == "Bearer sk-very-secret-value"
    for f in run_dir.iterdir():
        assert b"sk-very-secret-value" not in f.read_bytes(), f.name
    run = json.loads((run_dir / records.RUN_FILE).read_text())
    assert run["status"] == "completed" and run["seed"] == 0
    assert run["scenario"]["endpoints"][0]["headers"]["X-Api-Key"] == "<redacted>"
    assert run["clock"]["anchor_wall_ns"] > 0 and "not for latency" in run["clock"]["anchor_note"]
    sm = pq.read_table(run_dir / records.SERVER_METRICS_FILE).to_pandas()
    assert {"fake_requests_total", "fake_prompt_tokens_total"} <= set(sm.name)
    last = sm[sm.name == "fake_requests_total"].sort_values("time_ns").value.iloc[-1]
    assert last == 16 + len(fake_servers[0].probes)  # replayed + calibration probes


@pytest.mark.timeout(60)
async def test_original_timing_follows_recorded_start_to_start(fake_servers, tmp_path):  # type: ignore[no-untyped-def]
    trace = tiny_trace(roots=1, turns=4)  # turns recorded at t = 0, 1, 2, 3 s
    sc = scenario([fake_servers[0].url], tmp_path, timing={"strategy": "original",
                                                     "time_scale": 0.05})
    req = requests_of(await _run(sc, trace)).sort_values("turn")
    gaps = np.diff(req.scheduled_ns.to_numpy()) / 1e9
    assert np.allclose(gaps, 0.05, atol=0.002)  # 1 s recorded x 0.05
    assert ((req.sent_ns - req.scheduled_ns) >= 0).all()
