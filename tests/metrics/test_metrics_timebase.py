"""Simulated time (every endpoint the simulator at one speedup S: server-side durations x S,
rates / S, schedule lag in wall time) and agents cut by the run's own bound, on
hand-built records with the arithmetic written out."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from agentbench import load
from agentbench.metrics import format_summary, read_records, summarize
from agentbench.metrics.bootstrap import tree_data
from agentbench.metrics.derive import derive
from agentbench.results.timebase import time_base
from tests.helpers import MS, hand_scenario, req, sess, write_run

SIM = {"kind": "simulated", "speedup": 100.0}
REAL = {"kind": "openai", "url": "http://x", "model": "m"}


#: the run.json scenario of these runs: its endpoints, time_scale 0.01 unless given
scenario = functools.partial(hand_scenario, "tb", time_scale=0.01)


def one_request_run(d: Path, sc: dict[str, Any]) -> Path:
    """One turn, wall times: scheduled 0, sent 2 ms (lag 2 ms), first token 3 ms, last
    token 12 ms, end 13 ms; 10 output tokens in events of 1,2,2,2,3 tokens."""
    r = req(scheduled_ns=0, sent_ns=2 * MS, first_token_ns=3 * MS, last_token_ns=12 * MS,
            end_ns=13 * MS, token_events=5,
            token_event_ns=[3 * MS, 5 * MS, 7 * MS, 9 * MS, 12 * MS],
            token_event_tokens=[1, 2, 2, 2, 3], prompt_tokens=1000, completion_tokens=10,
            cached_tokens=400, expected_input_tokens=1000, potential_cached_tokens=400)
    s = sess(start_ns=2 * MS, end_ns=13 * MS, makespan_ns=11 * MS, llm_wait_ns=11 * MS)
    return write_run(d, [r], [s], scenario=sc)


def test_time_base_from_the_scenario() -> None:
    tb = time_base({"scenario": scenario([SIM, {**SIM, "name": "b"}])})
    assert (tb.kind, tb.factor, tb.speedup) == ("simulated", 100.0, 100.0)
    # a wall-clock simulator run says that host load moves its figures
    assert len(tb.warnings) == 1 and "host's load moves these figures" in tb.warnings[0]
    # think times compressed 1000x, server times 100x: said, not hidden
    tb = time_base({"scenario": scenario([SIM], time_scale=0.001)})
    assert tb.kind == "simulated" and "time_scale 0.001 is not 1/speedup (0.01)" in \
        tb.warnings[0]
    # virtual time: simulated ns throughout, nothing to scale, no warning
    tb = time_base({"scenario": scenario([SIM]), "time_base": "virtual"})
    assert (tb.kind, tb.factor, tb.speedup, tb.warnings) == ("virtual", 1.0, None, [])
    mixed = time_base({"scenario": scenario([SIM, REAL])})
    assert (mixed.kind, mixed.factor) == ("wall", 1.0) and "mixes real and simulated" in \
        mixed.note
    two = time_base({"scenario": scenario([SIM, {**SIM, "speedup": 10.0}])})
    assert (two.kind, two.factor) == ("wall", 1.0) and "different speedups" in two.note
    assert time_base({"scenario": scenario([REAL])}).kind == "wall"
    assert time_base({}).kind == "wall"
    pulled = time_base({"scenario": scenario([SIM]), "idle_pulled_in_ns": 2_500_000_000})
    assert "2.5 s of wall time, 250 s simulated" in pulled.warnings[-1]


def test_simulated_time_arithmetic(tmp_path: Path) -> None:
    wall = summarize(one_request_run(tmp_path / "wall", scenario([REAL])))
    sim = summarize(one_request_run(tmp_path / "sim", scenario([SIM])))
    assert wall["time_base"]["kind"] == "wall"
    assert sim["time_base"] == {**sim["time_base"], "kind": "simulated", "speedup": 100.0,
                                "factor": 100.0}
    w, s = wall["overall"], sim["overall"]
    lat = s["latency"]
    # TTFT = (3 − 2) ms x 100 = 100 ms (wall: 1 ms)
    assert w["latency"]["ttft_ms"]["p50"] == pytest.approx(1.0)
    assert lat["ttft_ms"]["p50"] == pytest.approx(100.0)
    # TPOT = (12 − 3) / (10 − 1) = 1 ms x 100 = 100 ms; interactivity 1 / 100 ms = 10 tok/s
    assert lat["tpot_ms"]["p50"] == pytest.approx(100.0)
    assert s["interactivity_tok_s"]["p50"] == pytest.approx(10.0)
    assert w["interactivity_tok_s"]["p50"] == pytest.approx(1000.0)
    # ITL: gaps 2/2, 2/2, 2/2, 3/3 = 1 ms each, x 100
    assert lat["itl_ms"]["count"] == 4 and lat["itl_ms"]["mean"] == pytest.approx(100.0)
    # E2E = (13 − 2) ms x 100 = 1,100 ms
    assert lat["e2e_ms"]["p50"] == pytest.approx(1100.0)
    # schedule lag = 2 − 0 = 2 ms, the client's own delay: wall time in both
    assert lat["schedule_lag_ms"]["p50"] == w["latency"]["schedule_lag_ms"]["p50"] == \
        pytest.approx(2.0)
    # window: first send 2 ms → last end 13 ms = 0.011 s wall = 1.1 s simulated
    assert (s["window_wall_s"], s["window_s"]) == (pytest.approx(0.011), pytest.approx(1.1))
    # throughput = (1000 + 10) tokens / 1.1 s = 918.2 tok/s (wall: / 0.011 s = 91,818)
    assert s["throughput"]["total_tok_s"] == pytest.approx(1010 / 1.1)
    assert w["throughput"]["total_tok_s"] == pytest.approx(1010 / 0.011)
    assert s["throughput"]["per_gpu_total_tok_s"] == pytest.approx(1010 / 1.1 / 2)
    # cost = $3.6/GPU-h x 2 GPUs x 1.1 s / 3600 = $0.0022; API-equivalent is per token:
    # (600 x 3 + 400 x 0.3 + 10 x 15) / 1e6 = $0.00207, the same in both time bases
    assert s["cost"]["self_hosted_usd"] == pytest.approx(0.0022)
    assert w["cost"]["self_hosted_usd"] == pytest.approx(0.000022)
    assert s["cost"]["api_equivalent_usd"] == w["cost"]["api_equivalent_usd"] == \
        pytest.approx(0.00207)
    assert s["cost"]["api_over_self_hosted"] == pytest.approx(0.00207 / 0.0022)
    # agent makespan and LLM wait: 11 ms x 100 = 1.1 s
    assert s["agents"]["makespan_s"]["p50"] == pytest.approx(1.1)
    assert s["agents"]["llm_wait_s"]["p50"] == pytest.approx(1.1)
    assert sim["trees"]["makespan_s"] == [pytest.approx(1.1)]
    assert sim["by_turn"][0]["ttft_ms_p50"] == pytest.approx(100.0)
    # the hit rate is a token ratio: no time in it
    assert s["hit_rate"]["usage"]["value"] == w["hit_rate"]["usage"]["value"] == 0.4


def test_labels_and_consumers_agree(tmp_path: Path) -> None:
    d = one_request_run(tmp_path / "sim", scenario([SIM], time_scale=0.001))
    s = summarize(d)
    text = format_summary(s)
    head = text.splitlines()[0]
    assert "SIMULATED TIME (speedup 100x" in head
    assert "time_scale 0.001 is not 1/speedup" in text.splitlines()[1]
    lag = next(x for x in text.splitlines() if x.startswith("schedule lag"))
    assert lag.endswith("[wall time]")
    assert "wall-clock time" in format_summary(summarize(one_request_run(
        tmp_path / "wall", scenario([REAL]))))
    # reports show the label and the warning
    from agentbench.report.render import time_lines

    lines = time_lines(s)
    assert lines[0].startswith("Times: simulated time, speedup 100x.")
    assert lines[1].startswith("Warning: timing.time_scale 0.001")
    # the API's per-request columns and the gate's per-tree data use the same time base
    assert load(d).requests["ttft_ms"].tolist() == [pytest.approx(100.0)]
    rr = read_records(d)
    td = tree_data(rr, derive(rr.requests, rr.events))  # a wall-time Derived is redone
    assert td.window_s == pytest.approx(s["overall"]["window_s"])
    assert td.per_tree["makespan_s"].tolist() == [pytest.approx(1.1)]


def test_agents_cut_by_the_run_bound_are_not_failures(tmp_path: Path) -> None:
    def turn(tree: str, sent_ms: int, **kw: Any) -> dict[str, Any]:
        return req(tree_id=tree, session_id=tree.split("#")[0], scheduled_ns=sent_ms * MS,
                   sent_ns=sent_ms * MS, first_token_ns=(sent_ms + 10) * MS,
                   last_token_ns=(sent_ms + 10) * MS, end_ns=(sent_ms + 20) * MS,
                   completion_tokens=1, prompt_tokens=100, expected_input_tokens=100, **kw)

    reqs = [turn("a#0", 0),                                # completed, meets the SLO
            turn("b#0", 0),                                # 1 of 3 turns sent: cut
            turn("c#0", 0), req(tree_id="c#0", session_id="c", turn=1, scheduled_ns=30 * MS,
                                sent_ns=30 * MS, end_ns=40 * MS, status="cancelled",
                                expected_input_tokens=100),  # cancelled at the deadline
            turn("d#0", 0), req(tree_id="d#0", session_id="d", turn=1, scheduled_ns=30 * MS,
                                sent_ns=30 * MS, end_ns=35 * MS, status="error",
                                http_status=500, error_type="http",
                                expected_input_tokens=100)]  # the server failed it
    sessions = [sess(tree_id="a#0", session_id="a", makespan_ns=20 * MS),
                sess(tree_id="b#0", session_id="b", makespan_ns=20 * MS, turns_planned=3,
                     status="incomplete"),
                sess(tree_id="c#0", session_id="c", makespan_ns=40 * MS, turns_planned=2,
                     turns_done=2, status="cancelled"),
                sess(tree_id="d#0", session_id="d", makespan_ns=35 * MS, turns_planned=2,
                     turns_done=2, status="error")]
    s = summarize(write_run(tmp_path / "cut", reqs, sessions,
                            scenario={"slos": {"ttft_ms": 50}}))
    a = s["overall"]["agents"]
    assert (a["trees"], a["completed"], a["failed"], a["cut"]) == (4, 1, 1, 2)
    outcome = dict(zip(s["trees"]["tree_id"], s["trees"]["outcome"], strict=True))
    assert outcome == {"a#0": "completed", "b#0": "cut", "c#0": "cut", "d#0": "failed"}
    g = s["overall"]["goodput"]
    # agent goodput = good / (completed + failed) = 1 / 2, not 1 / 4
    assert (g["good_agents"], g["agents_judged"], g["agents"]) == (1, 2, pytest.approx(0.5))
    # makespan of completed trees only (a cut tree's is shorter than its agent's)
    assert (a["makespan_s"]["count"], a["makespan_s"]["p50"]) == (1, pytest.approx(0.02))
    line = next(x for x in format_summary(s).splitlines() if x.startswith("agents"))
    assert "1 completed, 1 failed, 2 cut by the run's bound" in line


def test_trees_a_lost_ray_worker_had_in_progress_are_cut_not_completed(tmp_path: Path) -> None:
    """A Ray load worker lost mid-run (run.json ``ray.lost``) never wrote the sessions rows
    of the trees it had in progress: those trees are cut, not completed. Worker ``w`` of
    ``W`` numbers its requests ``w, w + W, ...``; trees with their rows, and trees of a
    worker that was not lost, are judged as before."""
    import json

    def turn(tree: str, rid: int, sent_ms: int) -> dict[str, Any]:
        return req(request_id=rid, tree_id=tree, session_id=tree.split("#")[0],
                   scheduled_ns=sent_ms * MS, sent_ns=sent_ms * MS,
                   first_token_ns=(sent_ms + 10) * MS, last_token_ns=(sent_ms + 10) * MS,
                   end_ns=(sent_ms + 20) * MS, completion_tokens=1, prompt_tokens=100,
                   expected_input_tokens=100)

    reqs = [turn("a#0", 0, 0),                      # worker 0, ended: its root row says ok
            turn("b#0", 1, 0), turn("b#0", 3, 30),  # worker 1, lost with the tree going on
            turn("c#0", 5, 0),                      # worker 1, ended before it was lost
            turn("e#0", 2, 0)]                      # worker 0, no sessions row: as before
    sessions = [sess(tree_id="a#0", session_id="a", makespan_ns=20 * MS),
                sess(tree_id="c#0", session_id="c", makespan_ns=20 * MS)]
    d = write_run(tmp_path / "lost", reqs, sessions)
    info = json.loads((d / "run.json").read_text())
    info["ray"] = {"workers": [{"worker": 0, "node": "n0", "hostname": "h"},
                               {"worker": 1, "node": "n1", "hostname": "h"}],
                   "lost": [{"worker": 1, "node": "n1", "hostname": "h", "at_s": 1.0,
                             "requests_cut": 1}]}
    (d / "run.json").write_text(json.dumps(info))
    s = summarize(d)
    outcome = dict(zip(s["trees"]["tree_id"], s["trees"]["outcome"], strict=True))
    assert outcome == {"a#0": "completed", "b#0": "cut", "c#0": "completed",
                       "e#0": "completed"}
    a = s["overall"]["agents"]
    assert (a["trees"], a["completed"], a["failed"], a["cut"]) == (4, 3, 0, 1)


def test_a_stage_far_past_its_duration_is_pointed_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """on_deadline: finish lets long requests run on: the summary says by how much; with
    cancel the stage ends at the deadline and nothing is said."""
    from agentbench.metrics import summarize
    from agentbench.replay import run
    from agentbench.scenario.model import Scenario

    def sc(on_deadline: str) -> Scenario:
        return Scenario.model_validate({
            "name": "ovr", "endpoints": [{"kind": "simulated", "instances": 1}],
            "trace": {"kind": "synth", "profile": "codex", "sessions": 4},
            "load": {"kind": "lanes", "concurrency": 4},
            "limits": {"duration_s": 60, "recycle": True, "on_deadline": on_deadline},
            "output": {"dir": str(tmp_path), "run_id": on_deadline}})

    finish = summarize(run(sc("finish"), progress=False).run_dir, write=False)
    assert any("past limits.duration_s (60 s)" in w for w in finish["time_base"]["warnings"])
    cancel = summarize(run(sc("cancel"), progress=False).run_dir, write=False)
    assert not any("past limits" in w for w in cancel["time_base"]["warnings"])
