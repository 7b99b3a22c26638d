"""AgentX rules (``rules: agentx``): locks and defaults, refusing a conflicting setting,
context overflows (detected, ending their session, invalidating the run past 1%), the
validity verdict and the AgentX headline, on scenarios/agentx.yaml in virtual time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from agentbench.metrics import format_summary, summarize
from agentbench.replay import run as replay_run
from agentbench.replay.overflow import CONTEXT_OVERFLOW, DEFAULT_PHRASES, classifier, is_overflow
from agentbench.replay.schedule import warmup_start_turn
from agentbench.scenario import rules
from agentbench.scenario.flags import scenario_from_flags
from agentbench.scenario.loading import ScenarioError, load_scenario, parse_scenario
from tests.helpers import ROOT, SCENARIOS

AGENTX = SCENARIOS / "agentx.yaml"
#: a short test version of the shipped scenario: one concurrency point, AgentX's minimum
SHORT = [("load.concurrency", 4), ("limits.duration_s", 900)]

pytestmark = pytest.mark.timeout(120)


def _run(tmp_path: Path, sets: list[tuple[str, Any]]) -> tuple[Path, dict[str, Any]]:
    sc = load_scenario(AGENTX, sets=sets)
    sc.output.dir = str(tmp_path)
    res = replay_run(sc, progress=False)
    return res.run_dir, summarize(res.run_dir)


# ---------------------------------------------------------------- locks and defaults


def test_shipped_scenario_gets_the_agentx_defaults() -> None:
    sc = load_scenario(AGENTX)
    assert sc.rules == "agentx" and not sc.unsafe_override
    assert sc.limits.duration_s == rules.DEFAULT_DURATION_S == 1800
    assert sc.timing.strategy == "think-only" and sc.timing.time_scale == 1.0
    # the idle cap is set explicitly, so it applies in virtual time too
    assert sc.timing.idle_cap_for("virtual") == rules.IDLE_CAP_S == 10
    w = sc.warmup
    assert w.enabled and w.random_start and w.every_stage
    # one warm request per lane, as AIPerf 0.13.0 and the FAQ do (docs/agentx.md: ten, as
    # the v0.14.0 pages say, left half the requests out of a 600 s window)
    assert w.requests_per_lane == rules.WARMUP_REQUESTS_PER_LANE == 1
    assert (w.start_min_ratio, w.start_max_ratio) == (0, 1)
    assert rules.conflicts(sc) == []


def test_a_too_short_duration_refuses_to_start_naming_the_key() -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario(AGENTX, sets=[("limits.duration_s", 60)])
    lines = e.value.lines()
    assert len(lines) == 1
    assert "--set limits.duration_s" in lines[0] and "900" in lines[0]
    assert "unsafe_override" in lines[0]


@pytest.mark.parametrize(("key", "value"), [
    ("timing.strategy", "original"), ("timing.time_scale", 0.5), ("timing.idle_cap_s", 30),
    ("trace.transform.max_context_tokens", 32000), ("prompt.shared_prefix_tokens", 100),
    ("limits.max_requests", 10), ("warmup.enabled", False), ("limits.recycle", False)])
def test_each_lock_refuses_a_conflicting_value(key: str, value: Any) -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario(AGENTX, sets=[(key, value)])
    assert e.value.lines()[0].split(": ")[1] == f"--set {key}"


def test_ignore_eos_false_conflicts_and_none_becomes_true() -> None:
    text = """
name: t
rules: agentx
endpoints: [{kind: openai, url: http://localhost:8000, model: m}]
trace: {kind: file, source: builtin:claude-code-weka}
load: {kind: lanes, concurrency: 2}
"""
    sc = parse_scenario(text)
    assert sc.endpoints[0].ignore_eos is True
    with pytest.raises(ScenarioError, match="endpoints.0.ignore_eos"):
        parse_scenario(text.replace("model: m}", "model: m, ignore_eos: false}"))
    with pytest.raises(ScenarioError, match="trace.kind"):
        parse_scenario(text.replace("{kind: file, source: builtin:claude-code-weka}",
                                    "{kind: synth, profile: codex, sessions: 3}"))


def test_flags_only_run_takes_rules() -> None:
    sc = scenario_from_flags("http://127.0.0.1:8000", "m", rules="agentx")
    assert sc.rules == "agentx" and sc.limits.duration_s == 1800
    with pytest.raises(ScenarioError) as e:
        scenario_from_flags("http://127.0.0.1:8000", "m", rules="agentx", duration_s=60)
    assert "--duration" in e.value.lines()[0]
    sc = scenario_from_flags("http://127.0.0.1:8000", "m", rules="agentx", duration_s=60,
                             unsafe_override=True)
    assert rules.run_rules(sc)["overrides"] == [  # type: ignore[index]
        "limits.duration_s: 60 s is below AgentX's 900 s minimum"]


def test_random_start_stays_between_the_ratios() -> None:
    for lane in range(50):
        t = warmup_start_turn(42, lane, 100, True, 0.25, 0.75)
        assert 25 <= t < 75
    # the default ratios draw as before (the whole trajectory)
    assert [warmup_start_turn(0, i, 10, True) for i in range(5)] == \
        [warmup_start_turn(0, i, 10, True, 0.0, 1.0) for i in range(5)]


def test_random_start_by_time_is_the_last_turn_before_the_drawn_instant() -> None:
    # a burst of 90 turns in the first 10 s, then 10 turns over the next 990 s: over the
    # turns t* is mostly in the burst, over the recorded time mostly after it (AIPerf 0.13.0)
    times = [i / 9 for i in range(90)] + [10.0 + 99 * k for k in range(1, 11)]
    by_time = [warmup_start_turn(7, lane, 100, True, 0.0, 1.0, times) for lane in range(200)]
    by_turn = [warmup_start_turn(7, lane, 100, True) for lane in range(200)]
    assert sum(t >= 90 for t in by_time) > 150 and sum(t >= 90 for t in by_turn) < 40
    # each of the last 10 turns spans 99 s of the 1,000: drawn about 200 x 99 / 1000 times
    assert all(5 <= by_time.count(t) <= 40 for t in range(90, 99))
    assert by_time == [warmup_start_turn(7, lane, 100, True, 0.0, 1.0, times)
                       for lane in range(200)]  # seeded
    assert warmup_start_turn(7, 0, 100, False, 0.0, 1.0, times) == 0
    sc = load_scenario(AGENTX)
    assert sc.warmup.start_by == rules.START_BY == "time"


# ---------------------------------------------------------------- context overflow


@pytest.mark.parametrize("message", [
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
    '{"error": {"code": "context_length_exceeded", "message": "..."}}',
    "The input (300000 tokens) is longer than the model's context length (262144 tokens).",
    "the request exceeds the available context size, try increasing it",
    "prompt is too long: 210000 tokens > 200000 maximum",
    "The sum of prompt length and max_tokens exceeds max_seq_len (8192)",
])
def test_engine_overflow_messages_are_recognised(message: str) -> None:
    assert is_overflow("error", message, DEFAULT_PHRASES)
    row = {"status": "error", "error_message": message, "error_type": "http_400"}
    amend = classifier(None)
    assert amend is not None
    amend(row)
    assert row["error_type"] == CONTEXT_OVERFLOW


def test_other_errors_and_an_empty_list_are_not_overflows() -> None:
    assert not is_overflow("error", "Internal Server Error", DEFAULT_PHRASES)
    assert not is_overflow("ok", "maximum context length", DEFAULT_PHRASES)
    assert classifier([]) is None
    assert is_overflow("error", "Window Too Small", ["window too small"])


def test_filters_max_context_tokens_drops_trees_that_cannot_fit() -> None:
    from agentbench.traces.load import load_scenario_trace

    sc = load_scenario(AGENTX, sets=[("trace.filters.max_context_tokens", 60000)])
    trace = load_scenario_trace(sc.trace, sc.seed)
    assert trace.sessions
    assert all(t.input_tokens + t.output_tokens <= 60000
               for s in trace.sessions for t in s.turns)
    full = load_scenario_trace(load_scenario(AGENTX).trace, sc.seed)
    assert len(trace.roots()) < len(full.roots())


# ---------------------------------------------------------------- runs in virtual time


def test_agentx_run_is_valid_and_shows_the_headline(tmp_path: Path) -> None:
    run_dir, s = _run(tmp_path, SHORT)
    v = s["validity"]
    assert (v["rules"], v["valid"], v["reasons"]) == ("agentx", True, [])
    # valid, but the verdict says what load c=4 delivered: lanes that start inside the
    # recorded pauses leave fewer requests in flight than the label (a warning, no reason)
    assert [d.split(" delivered ")[0] for d in v["details"]] == ["warning: stage c=4"]
    ld = s["stages"]["c=4"]["load"]
    assert ld["lanes"] == 4 and ld["in_flight_mean"] < 2 and ld["delivered_share"] < 0.5
    (row,) = s["agentx"]
    assert row["stage"] == "c=4" and row["total_tok_s_per_gpu"] > 0
    assert row["interactivity_tok_s_p50"] > 0 and row["ttft_ms_p90"] >= row["ttft_ms_p50"]
    assert 0 < row["hit_rate_theoretical"] <= 1 and row["hit_rate_actual"] is not None
    assert row["api_over_self_hosted"] is not None and row["context_overflow_rate"] == 0
    # warmup: each lane's first request (its turn t*), and whatever a warm lane sends until
    # every lane is warm; excluded from every figure
    n = rules.WARMUP_REQUESTS_PER_LANE
    req = pd.read_parquet(run_dir / "requests.parquet").sort_values(["sent_ns", "request_id"])
    assert s["warmup_requests_excluded"] == (req["phase"] == "warmup").sum() >= 4
    (st,) = json.loads((run_dir / "run.json").read_text())["stages"]
    warm_at = []
    for _, g in req.groupby("lane"):
        warm = (g["phase"] == "warmup").to_numpy()
        assert warm[:min(n, len(warm))].all() and not warm[warm.sum():].any()
        if warm.sum() >= n:
            warm_at.append(int(g["end_ns"].iloc[:n].max()))
    # the 900 s profiling phase starts when the last lane is warm (its warm request ended),
    # as AIPerf's warmup runs outside its profiling duration; at the latest warmup.max_s
    # (default: duration_s) after the stage start
    expect = max(warm_at) if len(warm_at) == 4 else st["start_ns"] + 900 * 10**9
    assert st["profile_start_ns"] == min(expect, st["start_ns"] + 900 * 10**9)
    assert st["profile_start_ns"] > st["start_ns"]
    assert st["end_ns"] - st["profile_start_ns"] >= 900e9
    # the measured requests are those sent in the profiling phase, and every one of them
    measured = req[req["phase"] == "measure"]
    assert (measured["sent_ns"] >= st["profile_start_ns"]).all()
    late = req[req["sent_ns"] >= st["profile_start_ns"]]
    assert len(late) and (late["phase"] == "measure").all()
    text = format_summary(s)
    assert "validity      agentx: VALID" in text and "tok/s/GPU" in text
    from agentbench.report.render import render

    html, md = render([run_dir])
    page = md.read_text()
    assert "AgentX headline" in page and "Validity under rules agentx: valid" in page


def test_profiling_starts_when_the_last_lane_is_warm(tmp_path: Path) -> None:
    # t* over the turns: here every lane warms up well within the 900 s
    run_dir, s = _run(tmp_path, [*SHORT, ("warmup.requests_per_lane", 3),
                                 ("warmup.start_by", "turn")])
    req = pd.read_parquet(run_dir / "requests.parquet").sort_values("sent_ns")
    (st,) = json.loads((run_dir / "run.json").read_text())["stages"]
    # each lane's first 3 requests warm it up; the last lane warm starts the profiling
    warm_at = [int(g["end_ns"].iloc[:3].max()) for _, g in req.groupby("lane")]
    assert st["profile_start_ns"] == max(warm_at) > st["start_ns"]
    # before that every request is warmup (lanes warm early go on), after it measured
    before = req["sent_ns"] < st["profile_start_ns"]
    assert (req.loc[before, "phase"] == "warmup").all()
    assert (req.loc[~before, "phase"] == "measure").all() and (~before).sum() > 0
    assert before.sum() > 12  # more than the 3 x 4 counted ones
    # the deadline counts from there: nothing is sent after profile start + 900 s
    assert req["sent_ns"].max() <= st["profile_start_ns"] + 900 * 10**9
    assert req["sent_ns"].max() > st["start_ns"] + 900 * 10**9
    assert s["validity"]["valid"]


def test_a_small_context_window_makes_the_run_invalid(tmp_path: Path) -> None:
    run_dir, s = _run(tmp_path, [*SHORT, ("endpoints.0.max_context_tokens", 60000),
                                 ("trace.filters.max_context_tokens", None)])
    v = s["validity"]
    assert not v["valid"] and v["reasons"] == ["context_overflow_rate_exceeded"]
    r = s["stages"]["c=4"]["requests"]
    assert r["context_overflow"] > 0 and r["context_overflow_rate"] > 0.01
    req = pd.read_parquet(run_dir / "requests.parquet")
    ses = pd.read_parquet(run_dir / "sessions.parquet")
    over = req[req["error_type"] == CONTEXT_OVERFLOW]
    assert (over["http_status"] == 400).all()
    assert over["error_message"].str.contains("maximum context length").all()
    # each session ends at its first overflow: nothing of it is sent after that turn
    for (tree, sid), g in req.groupby(["tree_id", "session_id"]):
        hit = g[g["error_type"] == CONTEXT_OVERFLOW]
        if len(hit):
            assert len(hit) == 1 and g["turn"].max() == hit["turn"].iloc[0]
            st = ses[(ses["tree_id"] == tree) & (ses["session_id"] == sid)]["status"]
            assert list(st) == [CONTEXT_OVERFLOW]
    assert "INVALID (context_overflow_rate_exceeded)" in format_summary(s)


def test_an_overridden_short_run_runs_but_is_invalid(tmp_path: Path) -> None:
    _, s = _run(tmp_path, [("load.concurrency", 2), ("limits.duration_s", 120),
                           ("unsafe_override", True)])
    v = s["validity"]
    assert not v["valid"] and v["reasons"][0] == "unsafe_override"
    assert "limits.duration_s: 120 s is below AgentX's 900 s minimum" in v["details"][0]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_shipped_sweep_is_valid(tmp_path: Path) -> None:
    run_dir, s = _run(tmp_path, [])
    assert s["validity"]["valid"], s["validity"]
    assert [r["stage"] for r in s["agentx"]] == ["c=8", "c=16", "c=32"]
    # the chart's points say the load each stage delivered, and it is drawn once
    from agentbench.report.charts import stage_points
    from agentbench.report.render import render

    labels = [p[2] for p in stage_points(s, "interactivity_p50", "throughput_per_gpu")]
    assert all(lab.startswith(("c=8, ", "c=16, ", "c=32, ")) and lab.endswith(" in flight")
               for lab in labels), labels
    _, md = render([run_dir])
    assert md.read_text().count("agentx.png") == 1


def test_an_invalid_run_exits_3_with_its_reasons(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    args = ["run", str(AGENTX), "--set", "load.concurrency=2", "--set", "limits.duration_s=600",
            "--set", "unsafe_override=true", "--set", f"output.dir={tmp_path}", "--no-progress"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 3, r.output
    assert "agentx: INVALID (unsafe_override)" in r.stdout
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("invalid: ")]
    assert line.endswith(": not valid under rules agentx: unsafe_override")
    # a valid run under the same rules exits 0
    ok = CliRunner().invoke(app, ["run", str(AGENTX), "--set", "load.concurrency=2",
                                  "--set", "limits.duration_s=900",
                                  "--set", f"output.dir={tmp_path}", "--no-progress"])
    assert ok.exit_code == 0, ok.output
    assert "invalid:" not in ok.stderr


def test_without_a_duration_each_lane_measures_once_it_is_warm(tmp_path: Path) -> None:
    # no duration_s and no warmup.max_s bound a wait for the slowest lane: a lane's own
    # first 3 requests are warmup, everything after them measured, whatever other lanes do
    sc = load_scenario(AGENTX.parent / "quickstart.yaml",
                       sets=[("warmup.enabled", True), ("warmup.random_start", False),
                             ("warmup.requests_per_lane", 3)])
    sc.output.dir = str(tmp_path)
    res = replay_run(sc, progress=False)
    # subagents launched together are sent at one instant: in the order they were made
    req = pd.read_parquet(res.run_dir / "requests.parquet").sort_values(
        ["sent_ns", "request_id"])
    for _, g in req.groupby("lane"):
        phases = g["phase"].tolist()
        assert phases[:3] == ["warmup"] * 3 and set(phases[3:]) <= {"measure"}
    (st,) = json.loads((res.run_dir / "run.json").read_text())["stages"]
    assert st["profile_start_ns"] == st["start_ns"]
    first_measured = req.loc[req["phase"] == "measure", "sent_ns"].min()
    last_warm = req.loc[req["phase"] == "warmup", "sent_ns"].max()
    assert first_measured < last_warm  # lanes did not wait for each other


def test_the_aiperf_cross_check_scenario_is_valid_under_the_rules(tmp_path: Path) -> None:
    # benchmarks/peer_agentx.py's agentbench side: a 600 s point needs the override, a
    # 900 s one does not; one warmup request per lane is the rules' own default
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    peer = pytest.importorskip("peer_agentx")
    short = parse_scenario(json.dumps(peer.agentbench_doc(8123, 8, 600, 42, tmp_path, 1)))
    assert short.unsafe_override and rules.run_rules(short)["overrides"] == [  # type: ignore[index]
        "limits.duration_s: 600 s is below AgentX's 900 s minimum"]
    full = parse_scenario(json.dumps(peer.agentbench_doc(8123, 8, 900, 42, tmp_path)))
    assert not full.unsafe_override and rules.conflicts(full) == []
    assert full.warmup.requests_per_lane == short.warmup.requests_per_lane == 1
    assert full.trace.filters.max_context_tokens == peer.WINDOW
