"""Metrics on hand-built records: integer nanoseconds, the arithmetic written out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentbench.errors import InputError
from agentbench.metrics import format_summary, summarize
from agentbench.metrics.cache import counter_increase, counter_series
from agentbench.results import schema as R
from tests.helpers import MS, hand_scenario, req, sess, write_run

SCENARIO = hand_scenario("hand-built", slos={"ttft_ms": 80, "tpot_ms": 20})


def prom(t_ms: int, name: str, value: float) -> dict[str, Any]:
    return {"time_ns": t_ms * MS, "endpoint": "ep", "name": name,
            "labels": [("model_name", "m")], "value": value}


@pytest.fixture()
def hand_run(tmp_path: Path) -> Path:
    reqs = [
        # A: TTFT = 100 − 0 = 100 ms; TPOT = (190 − 100) / (10 − 1) = 10 ms; E2E = 200 ms;
        # events carry 1,2,2,2,3 tokens: ITL = 20/2, 20/2, 20/2, 30/3 = 10 ms each
        req(turn=0, scheduled_ns=0, sent_ns=0, first_token_ns=100 * MS,
            last_token_ns=190 * MS, end_ns=200 * MS, token_events=5,
            token_event_ns=[100 * MS, 120 * MS, 140 * MS, 160 * MS, 190 * MS],
            token_event_tokens=[1, 2, 2, 2, 3], prompt_tokens=1000, completion_tokens=10,
            cached_tokens=0, expected_input_tokens=1000, potential_cached_tokens=0),
        # B: TTFT = 350 − 300 = 50 ms; one token: no TPOT, no ITL; E2E = 60 ms
        req(turn=1, scheduled_ns=300 * MS, sent_ns=300 * MS, first_token_ns=350 * MS,
            last_token_ns=350 * MS, end_ns=360 * MS, token_events=1,
            token_event_ns=[350 * MS], token_event_tokens=[1], prompt_tokens=2000,
            completion_tokens=1, cached_tokens=900, expected_input_tokens=2000,
            potential_cached_tokens=1000),
        # C (spawned subagent, no usage): lag = 402 − 400 = 2 ms; TTFT = 432 − 402 = 30 ms;
        # output from the stream = 1 + 2 + 3 = 6, TPOT = (482 − 432) / (6 − 1) = 10 ms;
        # ITL = 25/2 = 12.5, 25/3 = 8.333 ms; E2E = 500 − 402 = 98 ms
        req(session_id="t/sub", relation="spawn", turn=0, scheduled_ns=400 * MS,
            sent_ns=402 * MS, first_token_ns=432 * MS, last_token_ns=482 * MS,
            end_ns=500 * MS, token_events=3, token_event_ns=[432 * MS, 457 * MS, 482 * MS],
            token_event_tokens=[1, 2, 3], expected_input_tokens=500),
        # D: failed with HTTP 500
        req(tree_id="u#0", session_id="u", lane=1, scheduled_ns=100 * MS, sent_ns=100 * MS,
            end_ns=110 * MS, status="error", http_status=500, error_type="http",
            error_message="boom", expected_input_tokens=800),
        # W: warmup, slow; excluded from every measured figure
        req(phase="warmup", tree_id="w#0", session_id="w", scheduled_ns=-9000 * MS,
            sent_ns=-9000 * MS, first_token_ns=-4000 * MS, last_token_ns=-3990 * MS,
            end_ns=-3980 * MS, prompt_tokens=50000, completion_tokens=2, cached_tokens=0,
            expected_input_tokens=50000, potential_cached_tokens=49000),
    ]
    sessions = [
        sess(makespan_ns=500 * MS, llm_wait_ns=358 * MS, turns_planned=2, turns_done=2),
        sess(session_id="t/sub", parent_id="t", relation="spawn"),
        sess(tree_id="u#0", session_id="u", lane=1, makespan_ns=110 * MS, status="error"),
        sess(phase="warmup", tree_id="w#0", session_id="w"),
    ]
    server = [  # Δ queries = 8000 − 5000 = 3000, Δ hits = 1000 − 100 = 900 over [-100, 600]
        prom(-100, "vllm:prefix_cache_queries_total", 5000),
        prom(250, "vllm:prefix_cache_queries_total", 6000),
        prom(600, "vllm:prefix_cache_queries_total", 8000),
        prom(-100, "vllm:prefix_cache_hits_total", 100),
        prom(250, "vllm:prefix_cache_hits_total", 400),
        prom(600, "vllm:prefix_cache_hits_total", 1000),
        prom(600, "vllm:num_requests_running", 3),
    ]
    return write_run(tmp_path / "run", reqs, sessions, server, SCENARIO)


def test_latencies(hand_run: Path) -> None:
    s = summarize(hand_run)["overall"]
    lat = s["latency"]
    # TTFT over the ok requests [100, 50, 30]: p50 = 50, mean = 180 / 3 = 60
    assert lat["ttft_ms"]["count"] == 3
    assert lat["ttft_ms"]["p50"] == pytest.approx(50)
    assert lat["ttft_ms"]["mean"] == pytest.approx(60)
    # TPOT: A = 10, C = 10 (from streamed tokens), B has none
    assert lat["tpot_ms"]["count"] == 2 and lat["tpot_ms"]["p50"] == pytest.approx(10)
    assert s["output_tokens_from_stream"] == 1
    # ITL: [10, 10, 10, 10, 12.5, 8.333]: mean = 60.833 / 6
    assert lat["itl_ms"]["count"] == 6
    assert lat["itl_ms"]["mean"] == pytest.approx((40 + 12.5 + 25 / 3) / 6)
    # E2E [200, 60, 98]: p50 = 98
    assert lat["e2e_ms"]["p50"] == pytest.approx(98)
    # schedule lag over the 4 measured requests [0, 0, 2, 0]: mean = 0.5
    assert lat["schedule_lag_ms"]["mean"] == pytest.approx(0.5)
    assert s["interactivity_tok_s"]["p50"] == pytest.approx(100)  # 1 / 10 ms


def test_counts_failed_and_warmup(hand_run: Path) -> None:
    summary = summarize(hand_run)
    r = summary["overall"]["requests"]
    assert (r["total"], r["ok"], r["failed"], r["cancelled"]) == (4, 3, 1, 0)
    assert r["error_rate"] == pytest.approx(1 / 4)
    assert r["errors"] == [{"error_type": "http", "http_status": 500, "count": 1}]
    assert summary["warmup_requests_excluded"] == 1


def test_throughput_and_hit_rates(hand_run: Path) -> None:
    s = summarize(hand_run)["overall"]
    # window: first measured send 0 → last end 500 ms = 0.5 s
    assert s["window_s"] == pytest.approx(0.5)
    t = s["throughput"]
    # input = 1000 + 2000 + 500 (C: no usage, trace's expected input) = 3500; output = 17
    assert t["total_tok_s"] == pytest.approx(3517 / 0.5)
    assert t["output_tok_s"] == pytest.approx(17 / 0.5)
    assert t["input_cached_tok_s"] == pytest.approx(900 / 0.5)
    assert t["input_uncached_tok_s"] == pytest.approx((1000 + 1100) / 0.5)
    assert t["input_cache_unknown_tok_s"] == pytest.approx(500 / 0.5)
    assert t["per_gpu_total_tok_s"] == pytest.approx(3517 / 0.5 / 2)
    h = s["hit_rate"]
    # usage: (0 + 900) / (1000 + 2000) over the 2 requests that reported it
    assert h["usage"]["value"] == pytest.approx(0.3)
    assert (h["usage"]["requests"], h["usage"]["requests_without_usage"]) == (2, 2)
    # Prometheus: 900 / 3000; potential: 1000 / (1000 + 2000 + 500 + 800)
    assert h["prometheus"]["value"] == pytest.approx(0.3)
    assert h["prometheus"]["counters"][0] == "vllm:prefix_cache_hits_total"
    assert h["potential"]["value"] == pytest.approx(1000 / 4300)
    # achieved / potential over requests with cached_tokens: 900 / 1000
    assert h["achieved_over_potential"] == pytest.approx(0.9)


def test_agents_goodput_cost(hand_run: Path) -> None:
    s = summarize(hand_run)
    o = s["overall"]
    a = o["agents"]
    assert (a["trees"], a["completed"]) == (2, 1)
    assert sorted(s["trees"]["makespan_s"]) == pytest.approx([0.11, 0.5])
    assert a["llm_wait_s"]["count"] == 1 and a["llm_wait_s"]["p50"] == pytest.approx(0.358)
    g = o["goodput"]
    # SLOs TTFT ≤ 80, TPOT ≤ 20: A misses TTFT (100), D failed → 2 good of 4
    assert g["requests"] == pytest.approx(0.5) and g["good_requests"] == 2
    assert g["agents"] == pytest.approx(0.0)  # t#0 holds A, u#0 failed
    c = o["cost"]
    # $3.6/GPU-h × 2 GPUs × 0.5 s / 3600 = $0.001
    assert c["self_hosted_usd"] == pytest.approx(0.001)
    assert c["per_agent_usd"] == pytest.approx(0.001)
    assert c["per_mtok_total_usd"] == pytest.approx(0.001 * 1e6 / 3517)
    assert "per_mtok_output_usd" not in c  # it charged all GPU cost to output tokens
    # API with its own cache (the trace's potential: 1000 of B's 2000), never the server's:
    # (3500 − 1000) × 3 + 1000 × 0.3 + 17 × 15 = 8055 $/Mtok·tok → $0.008055
    assert c["api_equivalent_usd"] == pytest.approx(0.008055)
    assert c["api_over_self_hosted"] == pytest.approx(8.055)


def test_by_turn_and_context(hand_run: Path) -> None:
    s = summarize(hand_run)
    turns = {r["turn"]: r for r in s["by_turn"]}
    assert turns[0]["requests"] == 3 and turns[0]["failed"] == 1  # A, C, D
    assert turns[0]["ttft_ms_p50"] == pytest.approx(65)  # median of [100, 30]
    assert turns[1]["hit_rate"] == pytest.approx(900 / 2000)
    ctx = {r["context_lo"]: r for r in s["by_context"]}
    assert ctx[0]["requests"] == 3  # A (1000), C (500), D (800)
    assert ctx[1024]["requests"] == 1 and ctx[1024]["context_hi"] == 2048  # B (2000)
    assert ctx[0]["ttft_ms_p50"] == pytest.approx(65)  # median of [100, 30]; D failed


def test_summary_json_written_and_formatted(hand_run: Path) -> None:
    s = summarize(hand_run)
    on_disk = json.loads((hand_run / R.SUMMARY_FILE).read_text())
    assert on_disk["overall"]["requests"]["total"] == 4
    text = format_summary(s)
    assert "1 failed" in text and "TTFT" in text and "30.0%" in text
    assert len(text.splitlines()) <= 25


def test_stages_and_endpoints(tmp_path: Path) -> None:
    reqs = [
        # stage c=1: window 0 → 100 ms
        req(sent_ns=0, first_token_ns=10 * MS, last_token_ns=10 * MS, end_ns=100 * MS,
            completion_tokens=1, prompt_tokens=100, expected_input_tokens=100),
        # stage c=2: window 1000 → 1400 ms, two endpoints
        req(stage="c=2", tree_id="x#0", scheduled_ns=1000 * MS, sent_ns=1000 * MS,
            first_token_ns=1020 * MS, last_token_ns=1020 * MS, end_ns=1400 * MS,
            completion_tokens=1, prompt_tokens=300, expected_input_tokens=300),
        req(stage="c=2", tree_id="y#0", endpoint="ep2", scheduled_ns=1100 * MS,
            sent_ns=1100 * MS, first_token_ns=1140 * MS, last_token_ns=1140 * MS,
            end_ns=1200 * MS, completion_tokens=1, prompt_tokens=100,
            expected_input_tokens=100),
    ]
    s = summarize(write_run(tmp_path / "r", reqs, scenario=SCENARIO))
    assert list(s["stages"]) == ["c=1", "c=2"]
    assert s["stages"]["c=1"]["window_s"] == pytest.approx(0.1)
    assert s["stages"]["c=2"]["window_s"] == pytest.approx(0.4)
    # overall window = 0.1 + 0.4 s; tokens (100 + 1) + (300 + 1) + (100 + 1) = 503
    assert s["overall"]["window_s"] == pytest.approx(0.5)
    assert s["overall"]["throughput"]["total_tok_s"] == pytest.approx(503 / 0.5)
    assert s["stages"]["c=2"]["throughput"]["total_tok_s"] == pytest.approx(402 / 0.4)
    assert s["endpoints"]["ep2"]["latency"]["ttft_ms"]["p50"] == pytest.approx(40)
    assert s["endpoints"]["ep"]["requests"]["total"] == 2
    assert s["endpoints"]["ep"]["cost"]["self_hosted_usd"] is None  # GPUs are per run


def test_counter_reset_and_labels() -> None:
    sm = pd.DataFrame({
        "time_ns": [0, 1, 2, 3, 0, 3], "endpoint": ["e"] * 6,
        "name": ["vllm:prefix_cache_hits_total"] * 4 + ["vllm:prefix_cache_hits_total"] * 2,
        "labels": ["engine=0"] * 4 + ["engine=1"] * 2,
        "value": [10.0, 20.0, 5.0, 15.0, 0.0, 7.0],
    })
    series = counter_series(sm)
    # engine 0: +10, reset (counts 5 from zero), +10 = 25; engine 1: +7
    assert counter_increase(series, [(0, 3)]) == pytest.approx(32)
    assert counter_increase(series, [(5, 9)]) is None  # no scrape after the window start


def test_no_usage_anywhere(tmp_path: Path) -> None:
    reqs = [req(sent_ns=0, first_token_ns=5 * MS, last_token_ns=5 * MS, end_ns=6 * MS,
                expected_input_tokens=10, potential_cached_tokens=5)]
    s = summarize(write_run(tmp_path / "r", reqs))["overall"]
    assert s["hit_rate"]["usage"]["value"] is None
    assert s["hit_rate"]["usage"]["requests_without_usage"] == 1
    assert s["hit_rate"]["potential"]["value"] == pytest.approx(0.5)
    assert s["hit_rate"]["prometheus"]["value"] is None
    assert s["cost"]["self_hosted_usd"] is None  # no price configured


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="results folder not found"):
        summarize(tmp_path / "nope")
    (tmp_path / "s.yaml").write_text("name: s\n")  # a scenario given for its results
    with pytest.raises(InputError, match="s.yaml: a file, not a results folder"):
        summarize(tmp_path / "s.yaml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="requests.parquet"):
        summarize(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    pq.write_table(pa.table({"request_id": np.arange(3)}), bad / R.REQUESTS_FILE)
    with pytest.raises(InputError, match="field 'stage'"):
        summarize(bad)
    mismatch = write_run(tmp_path / "events", [
        req(sent_ns=0, end_ns=1),
        req(sent_ns=0, end_ns=1, token_event_ns=[1, 2], token_event_tokens=[1])])
    # tolerated (an older writer left such rows): one token per event there
    assert summarize(mismatch, write=False)["overall"]["latency"]["itl_ms"]["count"] == 1
    d = write_run(tmp_path / "typo", [req(sent_ns=0, end_ns=1)],
                  scenario={"hardware": {"gpu": 2}})
    with pytest.raises(InputError, match=r"scenario\.hardware\.gpu"):
        summarize(d)


@pytest.mark.parametrize("text", [
    "[1]", "null", "3", '"summary"', "{not json", "[" * 100_000,
    # the shape of a summary, edited: a section of the wrong type, a figure changed
    "WRONG_SHAPE", "DOCTORED"])
def test_a_summary_json_that_is_not_one_written_intact_is_computed_again(
        hand_run: Path, tmp_path: Path, text: str) -> None:
    """summary.json is derived from the tables: one that is not JSON, not an object, or
    was edited by hand (its digest no longer matches) is computed again, so ``load``,
    ``report`` and ``gate`` neither fail on it (an AttributeError traceback for
    ``"overall": "x"``) nor show figures the tables do not give."""
    import os
    import shutil

    from typer.testing import CliRunner

    from agentbench import load
    from agentbench.cli import app
    from agentbench.metrics.summaryfile import DIGEST_KEY

    d = tmp_path / "copied"
    shutil.copytree(hand_run, d)
    truth = summarize(d)
    sp = d / R.SUMMARY_FILE
    on_disk = json.loads(sp.read_text())
    assert DIGEST_KEY in on_disk
    if text == "WRONG_SHAPE":
        text = json.dumps({**on_disk, "overall": "x"})
    elif text == "DOCTORED":
        on_disk["overall"]["requests"]["total"] = 4_000  # the digest kept as it was
        text = json.dumps(on_disk)
    sp.write_text(text)
    later = (d / R.REQUESTS_FILE).stat().st_mtime + 1
    os.utime(sp, (later, later))  # fresh by its time: it would be read as it is
    got = load(d).summary
    assert got["overall"] == truth["overall"] and got["overall"]["requests"]["total"] == 4
    assert DIGEST_KEY not in got
    res = CliRunner().invoke(app, ["report", str(d), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    # and written again, intact: the next reader takes it as it is
    assert json.loads(sp.read_text())["overall"] == truth["overall"]


def test_an_intact_summary_json_is_read_not_computed(hand_run: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbench import load
    from agentbench.metrics import summary as summary_module

    want = summarize(hand_run)
    os_time = (hand_run / R.REQUESTS_FILE).stat().st_mtime + 1
    import os
    os.utime(hand_run / R.SUMMARY_FILE, (os_time, os_time))

    def fail(*a: object, **k: object) -> None:
        raise AssertionError("computed again")

    monkeypatch.setattr(summary_module, "summarize_records", fail)
    assert load(hand_run).summary == want


def test_a_summary_without_digest_on_a_read_only_file_system_is_computed_not_written(
        hand_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run folder an earlier version wrote (its summary.json has no digest) on a
    read-only file system (a stored baseline mounted read-only): the summary is computed
    again and not written, as in a read-only folder; the write's EROFS was an error that
    stopped ``load``, ``report`` and ``gate``."""
    import errno
    import os

    from agentbench import load

    want = summarize(hand_run, write=False)
    sp = hand_run / R.SUMMARY_FILE
    sp.write_text(json.dumps(want, allow_nan=False, separators=(",", ":")))  # no digest
    later = (hand_run / R.REQUESTS_FILE).stat().st_mtime + 1
    os.utime(sp, (later, later))
    before = sp.read_text()

    def read_only(self: Path, *a: object, **k: object) -> int:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "write_text", read_only)
    assert load(hand_run).summary == want
    assert sp.read_text() == before


def test_two_writers_of_one_summary_at_once_both_replace_it(
        hand_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes summarizing one run at once (a notebook's ``load`` and ``agentbench
    report``): the second writer's whole write and replace falls between the first's
    write and replace. Each replaces summary.json whole and leaves no temporary file (one
    temporary name for both: the first's replace found it gone, FileNotFoundError)."""
    from agentbench.metrics.summaryfile import read_summary, write_summary

    want = summarize(hand_run, write=False)
    sp = hand_run / R.SUMMARY_FILE
    replace = Path.replace
    other = []

    def meanwhile(self: Path, target: Any) -> Path:
        if not other:
            other.append(self)
            write_summary(sp, {**want, "other": 1})  # the other process, all of it
        return replace(self, target)

    monkeypatch.setattr(Path, "replace", meanwhile)
    write_summary(sp, want)
    assert read_summary(sp) == want  # the last replace's, intact
    assert sorted(p.name for p in hand_run.iterdir() if p.suffix == ".tmp") == []


def test_only_warmup_and_empty(tmp_path: Path) -> None:
    reqs = [req(phase="warmup", sent_ns=0, first_token_ns=MS, last_token_ns=MS, end_ns=2 * MS)]
    s = summarize(write_run(tmp_path / "w", reqs))
    assert s["overall"]["requests"]["total"] == 0 and s["warmup_requests_excluded"] == 1
    assert s["overall"]["latency"]["ttft_ms"]["p50"] is None
    assert s["stages"] == {} and s["by_turn"] == [] and s["trees"]["tree_id"] == []
    assert "0 measured" in format_summary(s)
    s = summarize(write_run(tmp_path / "e", []))
    assert s["overall"]["requests"]["total"] == 0
    # every request cancelled before a token: no token served, so the API and
    # self-hosted costs compare nothing (it said "API/self-hosted 0x")
    cut = [req(tree_id=f"t{i}#0", sent_ns=0, end_ns=5 * MS, status="cancelled",
               expected_input_tokens=0, expected_output_tokens=0) for i in range(3)]
    s = summarize(write_run(tmp_path / "cut", cut, scenario={
        "name": "cut", "hardware": {"gpus": 4, "gpu_hour_usd": 3.5},
        "prices": {"input_per_mtok": 3.0, "cached_input_per_mtok": 0.3,
                   "output_per_mtok": 15.0}}))
    c = s["overall"]["cost"]
    assert c["tokens"]["total"] == 0 and c["api_over_self_hosted"] is None
    assert "API/self-hosted 0x" not in format_summary(s)


def test_cancelled_and_unsent(tmp_path: Path) -> None:
    reqs = [
        req(sent_ns=0, first_token_ns=10 * MS, last_token_ns=20 * MS, end_ns=30 * MS,
            completion_tokens=3, prompt_tokens=10, cached_tokens=0, expected_input_tokens=10),
        # cancelled at the deadline after its first token: counted, not in latencies
        req(tree_id="v#0", scheduled_ns=5 * MS, sent_ns=5 * MS, first_token_ns=8 * MS,
            end_ns=40 * MS, status="cancelled", expected_input_tokens=10),
        # never sent (connection refused before sending): counted at its scheduled time
        req(tree_id="x#0", scheduled_ns=50 * MS, status="error", error_type="connect",
            http_status=None, expected_input_tokens=10),
    ]
    s = summarize(write_run(tmp_path / "c", reqs))["overall"]
    r = s["requests"]
    assert (r["total"], r["ok"], r["failed"], r["cancelled"]) == (3, 1, 1, 1)
    # the cancelled one is neither: 1 failure of the 2 requests that ended (it once
    # counted as an "unknown" error, 2 / 3)
    assert r["error_rate"] == pytest.approx(1 / 2)
    assert {e["error_type"] for e in r["errors"]} == {"connect"}
    assert s["latency"]["ttft_ms"]["count"] == 1
    assert s["window_s"] == pytest.approx(0.05)  # first send 0 → the unsent one at 50 ms
    assert s["goodput"]["requests"] == pytest.approx(1 / 2)
    # nor in the per-group tables (they once said 2 failed of 3, beside 1 failed overall)
    full = summarize(tmp_path / "c")
    for name in ("by_turn", "by_context", "by_warmth"):
        assert sum(g["failed"] for g in full[name]) == 1, name
        assert sum(g["requests"] for g in full[name]) == 3, name


def test_agent_goodput_and_makespan_without_sessions(tmp_path: Path) -> None:
    def turn(tree: str, k: int, sent_ms: int, ttft_ms: int, end_ms: int) -> dict[str, Any]:
        return req(tree_id=tree, session_id=tree, turn=k, scheduled_ns=sent_ms * MS,
                   sent_ns=sent_ms * MS, first_token_ns=(sent_ms + ttft_ms) * MS,
                   last_token_ns=(sent_ms + ttft_ms) * MS, end_ns=end_ms * MS,
                   completion_tokens=1, expected_input_tokens=10)
    reqs = [turn("a#0", 0, 0, 10, 100), turn("a#0", 1, 400, 10, 1000),   # 1.0 s tree
            turn("b#0", 0, 0, 10, 100), turn("b#0", 1, 200, 10, 3000),   # 3.0 s tree
            turn("c#0", 0, 0, 900, 1000)]                                # TTFT 900 > 500
    scenario = {"slos": {"ttft_ms": 500, "agent_makespan_s": 2.0}}
    s = summarize(write_run(tmp_path / "g", reqs, scenario=scenario))
    # no sessions.parquet rows: makespan = last end − first send of each tree's requests
    mk = dict(zip(s["trees"]["tree_id"], s["trees"]["makespan_s"], strict=True))
    assert mk == pytest.approx({"a#0": 1.0, "b#0": 3.0, "c#0": 1.0})
    assert s["overall"]["agents"]["llm_wait_s"]["count"] == 0  # unknown without sessions
    # agents: a meets both; b misses the 2 s makespan; c has a request over the TTFT SLO
    g = s["overall"]["goodput"]
    assert (g["good_agents"], g["agents"]) == (1, pytest.approx(1 / 3))
    assert g["requests"] == pytest.approx(4 / 5)


def _agent_run(d: Path, slos: dict[str, Any]) -> dict[str, Any]:
    """Two agents of 10 requests each (5 tokens, 10 ms apart): ``a`` has one TTFT over
    100 ms; ``b`` five TTFTs over it and two TPOTs over 20 ms."""
    rows = []
    for tree, slow_ttft, slow_tpot in (("a", {3}, set()), ("b", {0, 2, 4, 6, 8}, {1, 5})):
        for k in range(10):
            t0 = (k * 1000) * MS
            ttft = 300 if k in slow_ttft else 50
            gap = 40 if k in slow_tpot else 10
            first = t0 + ttft * MS
            rows.append(req(tree_id=f"{tree}#0", session_id=tree, turn=k, sent_ns=t0,
                            first_token_ns=first, last_token_ns=first + 4 * gap * MS,
                            end_ns=first + 4 * gap * MS, completion_tokens=5,
                            prompt_tokens=10, cached_tokens=0, expected_input_tokens=10))
    sessions = [sess(tree_id=f"{t}#0", session_id=t, turns_planned=10, turns_done=10,
                     start_ns=0, end_ns=10_000 * MS, makespan_ns=10_000 * MS,
                     llm_wait_ns=1_000 * MS) for t in ("a", "b")]
    s = summarize(write_run(d, rows, sessions, scenario={"name": "agents", "slos": slos}))
    return {**s["overall"], "trees": s["trees"], "text": format_summary(s)}


def test_agent_goodput_by_share_of_good_requests_and_the_slos_missed(tmp_path: Path) -> None:
    slos = {"ttft_ms": 100, "tpot_ms": 20}
    every = _agent_run(tmp_path / "every", slos)
    # every request must be good (the default): neither agent is
    assert every["goodput"]["agents"] == 0.0
    assert every["goodput"]["agents_missed_by"] == {"ttft_ms": 2, "tpot_ms": 1}
    t = every["trees"]
    assert t["missed"] == ["ttft_ms", "ttft_ms,tpot_ms"]
    assert t["good_share"] == pytest.approx([0.9, 0.3])
    some = _agent_run(tmp_path / "share", {**slos, "agent_good_share": 0.8})
    # 9 of a's 10 requests are good (>= 80%); b's 3 of 10 are not enough
    assert some["goodput"]["agents"] == pytest.approx(0.5)
    assert some["goodput"]["agents_missed_by"] == {"ttft_ms": 1, "tpot_ms": 1}
    assert some["trees"]["missed"] == [None, "ttft_ms,tpot_ms"]
    assert "agents missed ttft_ms x1, tpot_ms x1" in some["text"]


def test_hardware_gpus_is_checked_against_what_the_simulator_models(tmp_path: Path) -> None:
    """``--set hardware.gpus=1`` on 4 simulated instances once read VALID under rules with
    tokens/s per GPU 4x too high: the mismatch is now a warning, and invalid under rules."""
    rows = [req(sent_ns=0, first_token_ns=10 * MS, last_token_ns=20 * MS, end_ns=20 * MS,
                completion_tokens=2, prompt_tokens=10, cached_tokens=0,
                expected_input_tokens=10)]

    def run(d: Path, gpus: float, modeled: list[int | None], rules: bool) -> dict[str, Any]:
        write_run(d, [dict(r) for r in rows])
        info: dict[str, Any] = {"scenario": {"name": "g", "hardware": {"gpus": gpus}},
                                "status": "completed",
                                "endpoints": [{"label": f"e{i}", "modeled_gpus": m}
                                              for i, m in enumerate(modeled)]}
        if rules:
            info["rules"] = {"name": "agentx"}
        (d / R.RUN_FILE).write_text(json.dumps(info))
        return summarize(d)

    bad = run(tmp_path / "bad", 1, [4], rules=True)
    assert bad["run"]["gpus_modeled"] == 4
    assert bad["validity"]["valid"] is False
    assert bad["validity"]["reasons"] == ["gpu_count_mismatch"]
    assert "off by 4x" in format_summary(bad)
    ok = run(tmp_path / "ok", 4, [2, 2], rules=True)
    assert ok["validity"]["valid"] is True and "off by" not in format_summary(ok)
    assert ok["run"]["gpus_source"].startswith("hardware.gpus, equal to")
    real = run(tmp_path / "real", 1, [None], rules=False)  # a real endpoint: stated, unchecked
    assert real["run"]["gpus_modeled"] is None
    assert "not checked" in real["run"]["gpus_source"]


def test_delivered_load_is_stated_beside_the_lanes(tmp_path: Path) -> None:
    """Four lanes configured; two send: lane 0 busy 0-100 ms and 200-300 ms, lane 1
    50-250 ms. Window 0-300 ms: in flight 400 ms / 300 ms = 1.33 on average; one request
    in flight for 200 ms and two for 100 ms, median 1; 1.33 of 4 lanes is 33%."""
    spans = [(0, 0, 100), (0, 200, 300), (1, 50, 250)]
    rows = [req(lane=lane, tree_id=f"t{lane}#0", sent_ns=a * MS, first_token_ns=a * MS + MS,
                last_token_ns=b * MS, end_ns=b * MS, completion_tokens=2, prompt_tokens=10,
                cached_tokens=0, expected_input_tokens=10) for lane, a, b in spans]
    d = write_run(tmp_path / "r", rows)
    info = json.loads((d / R.RUN_FILE).read_text())
    info["stages"] = [{"label": "c=1", "lanes": 4}]
    (d / R.RUN_FILE).write_text(json.dumps(info))
    s = summarize(d)
    ld = s["stages"]["c=1"]["load"]
    assert (ld["lanes"], ld["lanes_active"]) == (4, 2)
    assert ld["in_flight_mean"] == pytest.approx(400 / 300, abs=1e-3)
    assert ld["in_flight_p50"] == 1.0
    assert ld["delivered_share"] == pytest.approx(400 / 300 / 4, abs=1e-3)
    assert s["overall"]["load"] == ld
    assert "load          4 lanes, 2 active; in flight mean 1.33, p50 1 (33% of the lanes)" \
        in format_summary(s)


def test_ttft_of_cold_and_warm_requests_and_the_per_agent_table(tmp_path: Path) -> None:
    """What a cache hit buys: requests split by the cached share of their prompt (usage;
    the trace's potential where usage is missing), each group's TTFT; and the per-agent
    and per-group tables as DataFrames from ``agentbench.load``."""
    import agentbench

    def r(i: int, cached: float | None, ttft: int, potential: int = 0) -> dict[str, Any]:
        return req(tree_id=f"t{i}#0", session_id=f"t{i}", sent_ns=0,
                   first_token_ns=ttft * MS, last_token_ns=ttft * MS, end_ns=ttft * MS,
                   completion_tokens=1, prompt_tokens=None if cached is None else 100,
                   cached_tokens=cached, expected_input_tokens=100,
                   potential_cached_tokens=potential)

    rows = [r(0, 0, 900), r(1, 5, 800), r(2, 50, 400), r(3, 95, 100), r(4, 100, 50),
            r(5, None, 60, potential=96)]  # no usage: warm by the trace's potential
    # cut and failed without usage: not warm by the potential, which no cache served
    rows += [{**r(6 + i, None, 70, potential=96), "status": st, "first_token_ns": None,
              "last_token_ns": None, "completion_tokens": 0, "error_type": et}
             for i, (st, et) in enumerate([("cancelled", "cancelled"), ("error", "http_500")])]
    s = summarize(write_run(tmp_path / "w", rows))
    got = {g["warmth"]: (g["requests"], g["failed"], g["ttft_ms_p50"]) for g in s["by_warmth"]}
    assert got == {"cold": (2, 0, pytest.approx(850)), "partly cached": (1, 0, pytest.approx(400)),
                   "warm": (3, 0, pytest.approx(60)), "ended without usage": (2, 1, None)}
    line = next(ln for ln in format_summary(s).splitlines() if ln.startswith("TTFT by cache"))
    assert line == ("TTFT by cache  cold p50 850.0 ms (n=2), partly cached p50 400.0 ms (n=1), "
                    "warm p50 60.0 ms (n=3); 2 ended without usage")
    run = agentbench.load(tmp_path / "w")
    assert run.table("by_warmth")["warmth"].tolist() == ["cold", "partly cached", "warm",
                                                         "ended without usage"]
    assert len(run.agents) == 8 and {"good_share", "missed", "outcome"} <= set(run.agents)
    with pytest.raises(ValueError, match="by_turn, by_context or by_warmth"):
        run.table("by_nothing")


def test_empty_group_tables_keep_their_columns(tmp_path: Path) -> None:
    import agentbench

    d = write_run(tmp_path / "e", [])
    run = agentbench.load(d)
    for name in ("by_turn", "by_context", "by_warmth"):
        t = run.table(name)
        assert t.empty and {"requests", "ttft_ms_p50", "hit_rate"} <= set(t.columns), name
    assert "warmth" in run.table("by_warmth").columns
