"""``agentbench run`` without a scenario file (a scenario built from flags), ``--set`` and
``--seed`` overrides of a file, and the progress line's arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.replay.progress import Counts, Plan, clock, describe, fraction, plan_of
from agentbench.results import schema as records
from agentbench.scenario.flags import DEFAULT_TRACE, scenario_from_flags, trace_spec
from agentbench.scenario.loading import ScenarioError, load_scenario, parse_scenario, parse_set

NS = 1_000_000_000

VIRTUAL = """
name: tiny
endpoints:
  - kind: simulated
    instances: 2
trace: {kind: synth, profile: codex, sessions: 3}
load: {kind: lanes, concurrency: 2}
limits: {max_requests: 10}
"""


@pytest.fixture
def serve_sim() -> Iterator[str]:
    """``agentbench serve-sim`` in its own process on a free port; its base URL."""
    proc = subprocess.Popen([sys.executable, "-m", "agentbench.cli", "serve-sim", "--port", "0",
                             "--speedup", "50"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "serving simulator at http://127.0.0.1:PORT/v1 (...)"
        yield line.split()[3].removesuffix("/v1")
    finally:
        proc.terminate()
        proc.wait(10)


def one_error(args: list[str]) -> str:
    res = CliRunner().invoke(app, ["run", *args])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


# ---------------------------------------------------------------- flags-only runs


@pytest.mark.timeout(120)
def test_a_flags_only_run_against_serve_sim(serve_sim: str, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, [
        "run", "--url", serve_sim, "--model", "sim", "--concurrency", "2",
        "--trace", "synth:codex:4", "--max-requests", "12", "--seed", "5",
        "--set", "timing.time_scale=0", "-o", str(tmp_path), "--run-id", "r",
        "--no-progress"])
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "r" / records.RUN_FILE).read_text())
    sc = run["scenario"]
    assert run["status"] == "completed"
    assert sc["endpoints"][0]["url"] == serve_sim and sc["endpoints"][0]["model"] == "sim"
    assert sc["seed"] == 5 and sc["load"] == {"kind": "lanes", "concurrency": 2}
    assert sc["trace"]["kind"] == "synth" and sc["trace"]["sessions"] == 4
    assert sc["limits"]["max_requests"] == 12 and sc["limits"]["duration_s"] is None
    assert sc["timing"]["time_scale"] == 0
    assert pq.read_table(tmp_path / "r" / records.REQUESTS_FILE).num_rows == 12


def test_flags_defaults_make_a_run_that_ends() -> None:
    sc = scenario_from_flags("http://127.0.0.1:8000", "m")
    assert sc.limits.duration_s == 60 and sc.limits.max_requests is None
    assert sc.load.kind == "lanes" and sc.load.concurrency == 4
    assert trace_spec(DEFAULT_TRACE).items() <= sc.trace.model_dump().items()
    assert sc.endpoints[0].api == "chat" and sc.seed == 0 and sc.clock_mode == "wall"
    rate = scenario_from_flags("http://h:1", "m", rate=0.5, max_requests=40, api="completions")
    assert rate.load.kind == "rate" and rate.load.rate_per_s == 0.5
    assert rate.limits.duration_s is None and rate.limits.max_requests == 40
    assert rate.endpoints[0].api == "completions"


def test_trace_flag_forms(tmp_path: Path) -> None:
    assert trace_spec("synth:agentx") == {"kind": "synth", "profile": "agentx", "sessions": 20}
    assert trace_spec("synth:codex:7")["sessions"] == 7
    assert trace_spec("builtin:claude-code-weka") == {"kind": "file",
                                                      "source": "builtin:claude-code-weka"}
    (tmp_path / "t.jsonl").write_text("")
    sc = scenario_from_flags("http://h:1", "m", trace="t.jsonl", base_dir=tmp_path)
    assert sc.trace.source == str(tmp_path / "t.jsonl")  # relative to the current folder


@pytest.mark.parametrize(("args", "says"), [
    ([], "give a scenario file, or --url and --model"),
    (["--url", "http://h:1"], "or --model for a run built from flags"),
    (["--url", "localhost:8000", "--model", "m"], "--url: must start with http://"),
    (["--url", "http://h:1", "--model", "m", "--concurrency", "2", "--rate", "1"], "not both"),
    (["--url", "http://h:1", "--model", "m", "--concurrency", "0"], "--concurrency:"),
    (["--url", "http://h:1", "--model", "m", "--rate", "-1"], "--rate -> load:"),
    (["--url", "http://h:1", "--model", "m", "--api", "grpc"], "--api:"),
    (["--url", "http://h:1", "--model", "m", "--duration", "0"], "--duration:"),
    (["--url", "http://h:1", "--model", "m", "--max-requests", "0"], "--max-requests:"),
    (["--url", "http://h:1", "--model", "m", "--seed", "-1"], "--seed:"),
    (["--url", "http://h:1", "--model", "m", "--trace", "synth:codex:x"], "--trace:"),
    (["--url", "http://h:1", "--model", "m", "--trace", "no/such/file"],
     "--trace -> trace.source: no such file"),
    (["--url", "http://h:1", "--model", "m", "--set", "limits.duration_s=-1"],
     "--set limits.duration_s:"),
    (["--url", "http://h:1", "--model", "m", "--set", "limitz.x=1"], "--set limitz.x ->"),
    (["--url", "http://h:1", "--model", "m", "--set", "endpoints.2.url=x"],
     "--set endpoints.2.url: endpoints has no item 2"),
    (["--url", "http://h:1", "--model", "m", "--set", "seed"], "--set: expected KEY.PATH=VALUE"),
    (["--url", "http://h:1", "--model", "m", "--set", "seed=[1"], "--set seed: the value is"),
])
def test_flag_errors_are_one_line_naming_the_flag(args: list[str], says: str) -> None:
    assert says in one_error(args)


# ---------------------------------------------------------------- --set and --seed on a file


def test_set_overrides_a_file_before_it_is_validated(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(VIRTUAL)
    sc = load_scenario(f, sets=[parse_set("limits.max_requests=25"),
                                parse_set("endpoints.0.router=session_affinity"),
                                parse_set("load.concurrency=[1, 3]")])
    assert sc.limits.max_requests == 25 and sc.endpoints[0].router == "session_affinity"
    assert sc.load.concurrency == [1, 3]
    # a default that depends on the clock stays a default: --set works on the file's data
    assert "idle_cap_s" not in sc.timing.model_fields_set
    sc = load_scenario(f, sets=[parse_set("prices={input_per_mtok: 3, cached_input_per_mtok: "
                                          "0.3, output_per_mtok: 15}")])
    assert sc.prices is not None and sc.prices.output_per_mtok == 15


def test_a_bad_set_names_its_key_and_no_line_of_the_file() -> None:
    with pytest.raises(ScenarioError) as ei:
        parse_scenario(VIRTUAL, source="s.yaml", sets=[parse_set("load.concurrency=many")])
    assert [(p, ln) for p, ln, _ in ei.value.problems] == [("--set load.concurrency", None)]
    with pytest.raises(ScenarioError) as ei:
        parse_scenario(VIRTUAL, source="s.yaml", sets=[parse_set("load.kind=rate")])
    # the file's own key, no longer one of the new kind's, keeps its line
    assert ("load.concurrency", 7, "unknown key (typo?)") in ei.value.problems
    with pytest.raises(ScenarioError) as ei:
        parse_scenario(VIRTUAL, source="s.yaml", sets=[parse_set("name.x=1")])
    assert ei.value.problems[0][0] == "--set name.x"
    assert "not a mapping or list" in ei.value.problems[0][2]


def test_a_set_reaches_every_variant() -> None:
    text = VIRTUAL + "variants:\n  - {name: a}\n  - {name: b, set: {load.concurrency: 1}}\n"
    from agentbench.scenario.loading import expand_variants

    a, b = expand_variants(parse_scenario(text, sets=[parse_set("limits.max_requests=7")]))
    assert a.limits.max_requests == b.limits.max_requests == 7
    assert b.load.concurrency == 1


@pytest.mark.timeout(120)
def test_seed_and_set_on_a_scenario_file(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(VIRTUAL)
    res = CliRunner().invoke(app, ["run", str(f), "--seed", "7", "--set", "limits.max_requests=6",
                                   "-o", str(tmp_path), "--run-id", "r", "--no-progress"])
    assert res.exit_code == 0, res.output
    sc = json.loads((tmp_path / "r" / records.RUN_FILE).read_text())["scenario"]
    assert sc["seed"] == 7 and sc["limits"]["max_requests"] == 6
    assert "s.yaml: --seed: Input should be greater" in one_error([str(f), "--seed", "-2"])
    # the flag is named only when it was given; a --set of the same key is named as such
    assert "s.yaml: --set seed: must be an integer" in one_error(
        [str(f), "--set", "seed=2**70"])
    # an integer's hint asks for a whole number (1.0e+3 would be refused as a float)
    line = one_error([str(f), "--set", "limits.max_requests=1e3"])
    assert "--set limits.max_requests: must be an integer" in line and "e.g. 1000" in line
    assert "1.0e+3" not in line
    line = one_error([str(f), "--url", "http://h:1", "--concurrency", "3"])
    assert "--url, --concurrency: only for a run without a scenario file" in line
    # each flag's own key in the hint; the number repeated, the URL (a password?) not
    assert line.endswith("use --set endpoints.0.url=URL --set load.concurrency=3"), line


# ---------------------------------------------------------------- the progress line


def test_progress_share_is_the_furthest_bound_per_stage() -> None:
    plan = Plan(stages=2, trees=10, requests=None, duration_ns=100 * NS)
    start = Counts(trees=10, now_ns=50 * NS)  # stage 1 started after 10 trees, at 50 s
    # trees (14 - 10) / 10 = 0.4; time (80 - 50) / 100 = 0.3; share (1 + 0.4) / 2 = 0.7
    assert fraction(plan, 1, start, Counts(trees=14, now_ns=80 * NS)) == pytest.approx(0.7)
    # past the deadline, requests still finishing: below 100% until the stage ends
    assert fraction(plan, 1, start, Counts(trees=14, now_ns=500 * NS)) < 1


def test_progress_line_shows_totals_an_eta_and_simulated_time() -> None:
    plan = Plan(stages=1, trees=8, requests=200, duration_ns=None, simulated=True,
                virtual=True)
    now = Counts(trees=2, sessions=5, requests=50, errors=1, inflight=3,
                 now_ns=3725 * NS, ttft_ms=1500.0)
    share, text = describe(plan, 0, "c=8", Counts(), now, wall_s=10.0)
    # requests 50 / 200 = 0.25 beats trees 2 / 8 = 0.25: share 0.25, ETA 10 x 0.75 / 0.25
    assert share == pytest.approx(0.25)
    assert text == ("c=8 | sessions 2/8 (+3 subagents) | req 50/200 err 1 in flight 3 | "
                    "sim time 1:02:05 | TTFT p50 1.50 s (sim) | 0:10 elapsed, ETA 0:30")


def test_progress_ttft_is_in_the_run_time_base() -> None:
    def plan(text: str) -> Plan:
        return plan_of(parse_scenario(text), [], 1)

    wall_sim = VIRTUAL.replace("instances: 2", "instances: 2\n    speedup: 20") + \
        "clock: wall\n"
    p = plan(wall_sim)  # the summary scales a speedup simulator's times by its speedup
    assert (p.ttft_factor, p.simulated, p.virtual) == (20, True, False)
    _, text = describe(p, 0, "", Counts(), Counts(ttft_ms=10.0), 1.0)
    assert "TTFT p50 200 ms (sim)" in text and "sim time" not in text
    mixed = wall_sim.replace("endpoints:\n", "endpoints:\n  - {kind: openai, url: "
                             "'http://h:1', model: m}\n")
    p = plan(mixed)
    assert p.ttft_factor is None  # two time bases: no TTFT rather than a wrong one
    assert "TTFT" not in describe(p, 0, "", Counts(), Counts(ttft_ms=10.0), 1.0)[1]
    p = plan(VIRTUAL)
    assert (p.ttft_factor, p.simulated, p.virtual) == (1.0, True, True)
    assert (p.trees, p.requests) == (None, 10)


def test_clock_format() -> None:
    assert (clock(0), clock(65), clock(3600 + 61)) == ("0:00", "1:05", "1:01:01")


def test_off_a_terminal_the_progress_is_a_line_every_few_seconds(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """50 requests to a slow server once ran 9 minutes printing nothing into a CI log: off a
    terminal the progress text comes as lines (``LINE_EVERY_S`` apart); ``--no-progress``
    (``enabled=False``) keeps stderr quiet."""
    from types import SimpleNamespace

    from agentbench.replay import progress as P

    writer = SimpleNamespace(recent_ttft_ms=[], n_requests=7, n_errors=1)
    ctx = SimpleNamespace(writer=writer, trees_done=1, sessions_done=1,
                          timers=SimpleNamespace(inflight=2))
    plan = Plan(stages=1, trees=None, requests=50, duration_ns=None)
    bar = P.Progress(plan, lambda: 0, enabled=None)  # pytest's stderr is no terminal
    bar.refresh(ctx)  # the first line waits LINE_EVERY_S
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(P, "LINE_EVERY_S", 0.0)
    bar.refresh(ctx)
    bar.refresh(ctx)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("progress  14% | ")
    assert "req 7/50 err 1 in flight 2" in lines[0]
    quiet = P.Progress(plan, lambda: 0, enabled=False)
    quiet.refresh(ctx)
    quiet.close()
    assert capsys.readouterr().err == ""
    bar.close()


def test_a_virtual_runs_progress_is_drawn_as_rows_come_not_on_the_simulated_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress loop on the simulated clock woke every simulated second, through idle
    gaps too (a day between two requests cost a second of CPU): a virtual-time run draws
    when rows come (``ResultsWriter.on_tick``), at most twice a wall second, and once at
    the end."""
    from agentbench.replay import progress as P
    from agentbench.replay import run
    from agentbench.results import writer as W
    from agentbench.scenario.model import Scenario
    from agentbench.traces.model import Session, Trace, Turn

    loops: list[object] = []
    draws: list[int] = []
    monkeypatch.setattr(P.Progress, "loop", lambda self, ctx, stop: loops.append(ctx))
    real = P.Progress.refresh
    monkeypatch.setattr(P.Progress, "refresh",
                        lambda self, ctx: (draws.append(ctx.writer.n_requests), real(self, ctx)))
    monkeypatch.setattr(W, "TICK_EVERY_S", 0.0)  # every row draws
    turns = [Turn(0, 0.0, 0.0, None, 600, 4, np.arange(1, dtype=np.int64), 512)]
    sessions = [Session(f"s{i}", None, "root", None, None, None, "t", "t", i * 86_400.0,
                        turns) for i in range(3)]  # a day apart
    sc = Scenario.model_validate({
        "name": "idle", "trace": {"kind": "synth", "profile": "codex", "sessions": 1},
        "load": {"kind": "rate", "arrival": "trace"}, "limits": {"recycle": False},
        "endpoints": [{"kind": "simulated"}], "server_metrics": {"interval_s": 1e6},
        "output": {"dir": str(tmp_path)}})
    run(sc, trace=Trace(sessions, name="idle"), progress=True)
    assert loops == []  # no loop on the simulated clock
    # a draw per row written (requests, sessions, samples: the tick is 0 s here), then the
    # last figures; not one per simulated second of the two days
    assert draws == sorted(draws) and {1, 2, 3} <= set(draws) and draws[-1] == 3
    assert len(draws) < 20


def test_a_progress_display_that_fails_never_stops_a_virtual_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawn from the writer, a progress line into a closed pipe (``| head -n 1``) raised
    through a lane and left run.json at ``running`` with no parquet: the display is dropped
    at its first failure, and the run completes."""
    from agentbench.replay import progress as P
    from agentbench.replay import run
    from agentbench.results import writer as W

    calls: list[int] = []

    def broken(self: object, ctx: object) -> None:
        calls.append(1)
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(P.Progress, "refresh", broken)
    monkeypatch.setattr(W, "TICK_EVERY_S", 0.0)
    from tests.helpers import SCENARIOS

    sc = load_scenario(SCENARIOS / "quickstart.yaml")
    sc.output.dir = str(tmp_path)
    res = run(sc, progress=True)
    info = json.loads((res.run_dir / "run.json").read_text())
    assert info["status"] == "completed"
    assert pq.read_table(res.run_dir / "requests.parquet").num_rows == 274
    assert calls == [1]  # dropped at its first failure, the last draw included


def test_no_stderr_at_all_draws_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """``2>&-`` leaves ``sys.stderr`` None: the progress display is off (it raised in its
    ``isatty`` and left run.json at ``running``)."""
    from agentbench.replay import progress as P

    monkeypatch.setattr(sys, "stderr", None)
    plan = Plan(stages=1, trees=None, requests=5, duration_ns=None)
    for enabled in (None, True):
        bar = P.Progress(plan, lambda: 0, enabled=enabled)
        assert not bar.shown and not bar.lines
        bar.close()
