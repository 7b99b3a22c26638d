"""``--repeat N``: each variant run N times (wall clock: the same seed; virtual time:
seed + i), its headline figures over the runs with a Student-t 95% interval of the mean."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from agentbench.errors import InputError
from agentbench.experiment import run_experiment
from agentbench.experiment.arguments import MAX_REPEATS
from agentbench.metrics.repeats import format_repeats, interval, t975
from agentbench.scenario.model import Scenario


def test_the_interval_is_students_t_over_the_runs() -> None:
    row = interval([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)  # t(0.975, 2) x sd / sqrt(n)
    assert (row["n"], row["mean"], row["sd"]) == (3, 2.0, 1.0)
    assert row["ci95_low"] == pytest.approx(2 - half) and row["ci95_high"] == pytest.approx(
        2 + half)
    assert row["rel_half_width"] == pytest.approx(half / 2)
    assert interval([5.0]) == {"n": 1, "mean": 5.0} and interval([]) == {"n": 0, "mean": None}
    assert t975(1) == 12.706 and t975(30) == 2.042 and t975(500) == 1.960


def _scenario(tmp_path: Path, trace: dict) -> Scenario:
    return Scenario.model_validate({
        "name": "rep", "seed": 7,
        "endpoints": [{"kind": "simulated", "instances": 2, "preset": "h100-llama3-8b"}],
        "trace": trace, "load": {"kind": "lanes", "concurrency": 4},
        "limits": {"max_sessions": 6, "recycle": False}, "hardware": {"gpus": 2},
        "slos": {"ttft_ms": 2000}, "output": {"dir": str(tmp_path)}})


def test_repeats_in_virtual_time_vary_the_seed_and_give_intervals(tmp_path: Path) -> None:
    sc = _scenario(tmp_path, {"kind": "synth", "profile": "codex", "sessions": 6,
                              "transform": {"scale": 0.2}})
    res = run_experiment(sc, repeat=3)
    assert [r.run_dir.name.rsplit("-", 2)[0] for r in res.runs] == [
        "rep-rep01", "rep-rep02", "rep-rep03"]
    seeds = [json.loads((r.run_dir / "run.json").read_text())["seed"] for r in res.runs]
    assert seeds == [7, 8, 9]
    table = res.repeats["rep"]
    assert table["throughput"]["n"] == 3 and table["throughput"]["sd"] > 0
    assert table["throughput"]["ci95_low"] < table["throughput"]["mean"] \
        < table["throughput"]["ci95_high"]
    assert res.comparison is None  # one variant: its repeats are the table, not a comparison
    lines = format_repeats(table)
    assert any(ln.strip().startswith("throughput ") and "95% CI [" in ln for ln in lines)


def test_identical_repeats_say_why(tmp_path: Path) -> None:
    sc = _scenario(tmp_path, {"kind": "file", "source": "builtin:claude-code-weka",
                              "filters": {"sessions": ["trace_0693", "trace_0504"]}})
    res = run_experiment(sc, repeat=2)
    assert res.repeats["rep"]["throughput"]["sd"] == 0
    assert "the runs are identical" in format_repeats(res.repeats["rep"])[-1]


def test_three_identical_runs_are_identical_whatever_the_rounding() -> None:
    """The mean of three equal values is not always that value in floating point
    (386.231453 * 3 / 3): the spread was 7e-14, so the quickstart's three identical
    virtual-time repeats lost the line that says why their interval is zero wide."""
    row = interval([386.231453] * 3)
    assert (row["mean"], row["sd"], row["ci95_low"], row["ci95_high"]) == (
        386.231453, 0.0, 386.231453, 386.231453)
    table = {"ttft_p50": {"values": [386.231453] * 3, **row}}
    assert "the runs are identical" in format_repeats(table)[-1]


def test_repeat_must_be_positive_and_alone_with_ray(tmp_path: Path) -> None:
    sc = _scenario(tmp_path, {"kind": "synth", "profile": "codex", "sessions": 2})
    with pytest.raises(InputError, match="at least 1"):
        run_experiment(sc, repeat=0)
    with pytest.raises(InputError, match="must be 1 on a Ray cluster"):  # before any run
        run_experiment(sc, repeat=2, ray="local")
    assert not list(tmp_path.iterdir())


def test_a_run_id_names_every_repeat(tmp_path: Path) -> None:
    sc = _scenario(tmp_path, {"kind": "synth", "profile": "codex", "sessions": 2,
                              "transform": {"scale": 0.1}})
    sc.output.run_id = "myid"
    res = run_experiment(sc, repeat=2)
    assert [r.run_dir.name for r in res.runs] == ["myid-rep01", "myid-rep02"]


def test_intervals_stop_at_what_a_figure_can_be() -> None:
    """Two runs far apart: the t interval would reach below 0 and a share above 100%."""
    table = {"hit_rate": {"values": [0.1, 0.99], **interval([0.1, 0.99])},
             "ttft_p50": {"values": [10.0, 900.0], **interval([10.0, 900.0])}}
    hit, ttft = format_repeats(table)
    assert "95% CI [0.0%, 100.0%]" in hit and "mean 54.5%" in hit
    assert "95% CI [0, " in ttft


def test_a_repeat_count_past_the_bound_is_refused_before_anything_runs(tmp_path: Path
                                                                      ) -> None:
    """``--repeat 2**70`` made a copy of the scenario for every repeat before the first
    run: the process grew without a word until it was killed."""
    sc = _scenario(tmp_path, {"kind": "synth", "profile": "codex", "sessions": 2})
    for n in (MAX_REPEATS + 1, 2**70):
        with pytest.raises(InputError, match=f"at most {MAX_REPEATS:,} runs of each variant"):
            run_experiment(sc, repeat=n)
    assert not list(tmp_path.iterdir())


def test_repeats_past_the_largest_seed_or_run_id_are_refused(tmp_path: Path) -> None:
    """A virtual-time repeat runs seed + i, and its folder is <run-id>-repNN: a seed near
    2**63 or a run id near its 200 characters was a pydantic traceback (exit 1) after
    the scenario was checked."""
    sc = _scenario(tmp_path, {"kind": "synth", "profile": "codex", "sessions": 2})
    sc.seed = 2**63 - 2
    with pytest.raises(InputError, match="past the largest seed"):
        run_experiment(sc, repeat=3)
    sc.seed = 7
    sc.output.run_id = "r" * 196
    with pytest.raises(InputError, match="past the 200 characters a run id may have"):
        run_experiment(sc, repeat=2)
    assert not list(tmp_path.iterdir())


def test_a_mean_and_its_interval_are_shown_to_one_number_of_decimals() -> None:
    """A share whose interval is [92.6%, 93%] read as if its bounds were known to
    different precision (each to three significant digits, trailing zeros dropped)."""
    table = {"hit_rate": {"values": [0.926, 0.928, 0.93], **interval([0.926, 0.928, 0.93])}}
    line = format_repeats(table)[0]
    assert "mean 92.8%" in line and "95% CI [92.3%, 93.3%]" in line, line
    row = interval([1.5, 1.52, 1.48])  # 1.50, not 1.5 beside 1.45
    line = format_repeats({"ttft_p50": {"values": [1.5, 1.52, 1.48], **row}})[0]
    assert "mean 1.50 ms" in line and "[1.45, 1.55 ms]" in line, line
    row = interval([1200.0, 1300.0, 1250.0])
    line = format_repeats({"ttft_p50": {"values": [1200.0, 1300.0, 1250.0], **row}})[0]
    assert "mean 1,250 ms" in line and "[1,126, 1,374 ms]" in line, line
