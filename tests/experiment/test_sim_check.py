"""``agentbench sim check``: a real (wall-clock) run against the simulator served over HTTP,
replayed on the embedded simulator with a preset in virtual time; every row measured against
predicted, with its error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.experiment import run_experiment
from agentbench.experiment.simcheck import (
    OK_ROW,
    ROWS,
    compare_figures,
    figures,
    sim_check,
    simulated_scenario,
)
from agentbench.metrics.run import load
from agentbench.scenario.loading import validate_data
from tests.helpers import serve_sim

PRESET = "h100-llama3-8b"


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with serve_sim("--preset", PRESET, "--speedup", "50") as url:
        yield url


@pytest.fixture(scope="module")
def real_run(sim_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("res")
    sc = validate_data({
        "name": "real", "seed": 0,
        "endpoints": [{"kind": "openai", "url": sim_url, "model": "sim", "ignore_eos": True}],
        "trace": {"kind": "file", "source": "builtin:claude-code-weka",
                  "filters": {"sessions": ["trace_0291", "trace_0277"]}},
        "load": {"kind": "lanes", "concurrency": 2},
        "timing": {"time_scale": 0.0},
        "limits": {"max_requests": 16, "recycle": False},
        "output": {"dir": str(out), "run_id": "real"},
    }, "test")
    res = run_experiment(sc)
    assert res.runs[0].summary["overall"]["requests"]["ok"] == 16
    return res.runs[0].run_dir


@pytest.mark.timeout(60)
def test_check_sets_predicted_against_measured(real_run: Path, tmp_path: Path) -> None:
    check = sim_check(real_run, PRESET, out=tmp_path / "sim")
    assert [r.metric for r in check.rows] == [*ROWS, OK_ROW]
    assert check.sim_dir == tmp_path / "sim" and check.instances == 1
    assert check.provenance["hardware"] and check.provenance["engine"]
    measured = figures(load(real_run).summary)
    # the same simulated scenario run separately: virtual time gives the same figures
    sc = simulated_scenario(load(real_run).scenario, PRESET, out=tmp_path / "again")
    assert sc.clock_mode == "virtual" and sc.endpoints[0].kind == "simulated"
    predicted = figures(run_experiment(sc).runs[0].summary)
    for r in check.rows:
        assert r.measured == measured[r.metric], r.metric
        assert r.predicted == pytest.approx(predicted[r.metric]), r.metric
        assert r.measured is not None and r.predicted is not None, r.metric
        if r.metric == "hit_rate":
            assert r.error_unit == "pt"
            assert r.error == pytest.approx(100 * (r.predicted - r.measured))
        else:
            assert r.error_unit == "%"
            if r.measured == 0:
                # a loaded client can read one step's tokens as one chunk (ITL p50 0 s on
                # one CI run): no relative error exists, and none is claimed
                assert r.error is None, r.metric
            else:
                assert r.error == pytest.approx(r.predicted / r.measured - 1)
    assert check.row(OK_ROW).measured == check.row(OK_ROW).predicted == 16
    # serve-sim ran 50x faster than real time: the prediction is slower, by about that
    tpot_error = check.row("tpot_p50").error
    assert tpot_error is not None and tpot_error > 5
    assert any("wall-clock" in n for n in check.notes)


@pytest.mark.timeout(60)
def test_cli_prints_the_table_and_json(real_run: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["sim", "check", str(real_run), "--preset", PRESET,
                                   "-o", str(tmp_path / "s1")])
    assert res.exit_code == 0, res.output
    for label in ("P50 TTFT", "P90 TTFT", "P50 ITL", "P50 E2E", "P50 TPOT", "throughput",
                  "output throughput", "hit rate", "requests ok"):
        assert label in res.output
    assert f"predicted run: {tmp_path / 's1'}" in res.output
    assert "on 1x NVIDIA H100" in res.output
    res = CliRunner().invoke(app, ["sim", "check", str(real_run), "--preset", PRESET,
                                   "-o", str(tmp_path / "s2"), "--json", "--instances", "2"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["instances"] == 2 and len(data["rows"]) == len(ROWS) + 1
    assert data["sim_dir"] == str(tmp_path / "s2")


@pytest.mark.timeout(60)
def test_a_simulated_run_is_checked_against_another_preset(real_run: Path,
                                                          tmp_path: Path) -> None:
    first = sim_check(real_run, PRESET, out=tmp_path / "a")
    again = sim_check(first.sim_dir, "h200-llama3-70b", out=tmp_path / "b")
    assert any("preset against another" in n for n in again.notes)
    assert again.row(OK_ROW).predicted == 16


def test_bad_input_is_one_line(real_run: Path, tmp_path: Path) -> None:
    def fails(*args: str) -> str:
        res = CliRunner().invoke(app, ["sim", "check", *args])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), res.output
        return lines[0]

    assert "results folder not found" in fails(str(tmp_path / "nope"), "--preset", PRESET)
    assert "not a run folder agentbench wrote" in fails(str(tmp_path), "--preset", PRESET)
    assert "unknown simulator preset" in fails(str(real_run), "--preset", "no-such")
    assert "cannot read preset file" in fails(str(real_run), "--preset",
                                            str(tmp_path / "p.yaml"))


def test_an_option_out_of_bounds_is_named_not_run_json(real_run: Path, tmp_path: Path) -> None:
    """--out, --instances and --block-size out of bounds blamed the run's run.json:
    'run.json: output.run_id: must be a plain folder name' for -o ., 'run.json:
    endpoints.0.instances: ...' for --instances 20000."""
    def fails(*args: str) -> str:
        res = CliRunner().invoke(app, ["sim", "check", str(real_run), "--preset", PRESET,
                                       *args])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), res.output
        assert "output.run_id" not in lines[0] and "endpoints.0" not in lines[0], lines[0]
        return lines[0]

    for out in (".", str(tmp_path / "x" / ".."), str(tmp_path / "a b")):
        assert "field '--out': the run folder's name" in fails("-o", out)
    assert "--instances: Input should be less than or equal to 10000" in fails(
        "--instances", "20000", "-o", str(tmp_path / "i"))
    assert "--block-size: Input should be less than or equal to" in fails(
        "--block-size", str(2**40), "-o", str(tmp_path / "b"))
    assert not list(tmp_path.iterdir())


def test_an_unreadable_trace_is_one_line(real_run: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(real_run, copy)
    run = json.loads((copy / "run.json").read_text())
    run["scenario"]["trace"]["source"] = str(tmp_path / "gone.jsonl")
    (copy / "run.json").write_text(json.dumps(run))
    res = CliRunner().invoke(app, ["sim", "check", str(copy), "--preset", PRESET])
    assert res.exit_code == 2
    assert "gone.jsonl is not readable" in res.output


def test_a_measured_zero_has_no_relative_error(real_run: Path) -> None:
    """A client that reads a step's tokens as one chunk measures ITL p50 0 s: the row keeps
    both figures and claims no error (not a division by zero, not -100%)."""
    summary = json.loads((real_run / "summary.json").read_text())
    summary["overall"]["latency"]["itl_ms"]["p50"] = 5.0
    zeroed = json.loads(json.dumps(summary))
    zeroed["overall"]["latency"]["itl_ms"]["p50"] = 0.0
    rows = {r.metric: r for r in compare_figures(zeroed, summary)}
    itl = rows["itl_p50"]
    assert itl.measured == 0.0 and itl.predicted == 5.0
    assert itl.error is None
    assert rows["ttft_p50"].error == pytest.approx(0.0)
    assert rows["hit_rate"].error == pytest.approx(0.0)


@pytest.mark.timeout(60)
def test_a_run_that_did_not_complete_is_said_to_be_part_of_its_scenario(
        real_run: Path, tmp_path: Path) -> None:
    """A killed (or interrupted) run measured part of its scenario; the prediction replays
    all of it: `sim check` of a run killed 20 requests in set 12 measured requests against
    400 predicted (P50 TTFT +13,816%) without a word."""
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(real_run, cut)
    info = json.loads((cut / "run.json").read_text())
    (cut / "run.json").write_text(json.dumps({**info, "status": "killed"}))
    (cut / "summary.json").unlink()
    check = sim_check(cut, PRESET, out=tmp_path / "sim")
    assert any("did not complete (status: killed)" in n and "whole scenario" in n
               for n in check.notes), check.notes
    assert not any("did not complete" in n
                   for n in sim_check(real_run, PRESET, out=tmp_path / "sim2").notes)
