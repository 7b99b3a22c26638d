"""The CI gate: identical re-runs pass, a planted 30% TTFT regression fails, a 2% change
under noise passes; bad input exits 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentbench import records as R
from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.metrics.bootstrap import _weighted_quantile
from agentbench.report.gate import evaluate, load_rules, parse_rules
from agentbench.testing.demo import write_demo_run

runner = CliRunner()
CONFIG = {"trees": 16, "turns": 30, "concurrency": (2, 8), "endpoints": ("sim",)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate")
    base = write_demo_run(root / "base", seed=1, **CONFIG)  # type: ignore[arg-type]
    rerun = write_demo_run(root / "rerun", seed=2, **CONFIG)  # type: ignore[arg-type]
    plus2 = write_demo_run(root / "plus2", seed=3, ttft_scale=1.02, **CONFIG)  # type: ignore[arg-type]
    planted = root / "planted"
    shutil.copytree(base, planted)
    _plant_ttft_regression(planted, 1.30)
    return {"base": base, "rerun": rerun, "plus2": plus2, "planted": planted}


def _plant_ttft_regression(d: Path, factor: float) -> None:
    """Every request's TTFT × factor: the first token (and everything after it) moves
    later by (factor − 1) × TTFT."""
    t = pq.read_table(d / R.REQUESTS_FILE)
    sent = t["sent_ns"].to_numpy(zero_copy_only=False)
    first = t["first_token_ns"].to_numpy(zero_copy_only=False)
    shift = np.nan_to_num((first - sent) * (factor - 1)).astype(np.int64)
    cols = {}
    for c in ("first_token_ns", "last_token_ns", "end_ns"):
        cols[c] = pc.add(t[c], pa.array(shift))
    lengths = pc.fill_null(pc.list_value_length(t["token_event_ns"]), 0).to_numpy()
    ev = t["token_event_ns"].combine_chunks()
    flat = pc.list_flatten(ev).to_numpy() + np.repeat(shift, lengths)
    cols["token_event_ns"] = pa.ListArray.from_arrays(ev.offsets, pa.array(flat, pa.int64()),
                                                      mask=ev.is_null())
    for c, v in cols.items():
        t = t.set_column(t.schema.get_field_index(c), c, v)
    pq.write_table(t, d / R.REQUESTS_FILE)
    (d / R.SUMMARY_FILE).unlink(missing_ok=True)


def _gate(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, ["gate", *args])
    return res.exit_code, res.output


def test_identical_rerun_passes(runs: dict[str, Path], tmp_path: Path) -> None:
    code, out = _gate(str(runs["base"]), str(runs["rerun"]), "--markdown",
                      str(tmp_path / "g.md"))
    assert code == 0, out
    assert "PASS" in out
    code, out = _gate(str(runs["base"]), str(runs["base"]), "--markdown",
                      str(tmp_path / "g2.md"))
    assert code == 0, out
    assert "+0.0%" in out


def test_planted_30pct_ttft_regression_fails(runs: dict[str, Path], tmp_path: Path) -> None:
    md = tmp_path / "gate.md"
    code, out = _gate(str(runs["base"]), str(runs["planted"]), "--markdown", str(md))
    assert code == 1, out
    ttft = next(line for line in out.splitlines() if line.startswith("ttft_p50"))
    assert "FAIL" in ttft and "+30.0%" in ttft
    text = md.read_text()
    assert "❌ regression" in text and "| ttft_p50 |" in text


def test_two_percent_change_under_noise_passes(runs: dict[str, Path]) -> None:
    rules, opts = parse_rules({"ttft_p50": {"max_increase": "10%"},
                               "ttft_p90": {"max_increase": "10%"},
                               "goodput": {"max_drop": "5pt"}})
    res = evaluate(runs["base"], runs["plus2"], rules, opts)
    assert res.passed, [(r.rule.metric, r.change, r.bound) for r in res.results]
    # the same 2% with a 1% threshold is still not a regression "with confidence"
    rules, opts = parse_rules({"ttft_p50": {"max_increase": "1%"}})
    res = evaluate(runs["base"], runs["plus2"], rules, opts)
    assert res.results[0].bound is not None and res.results[0].bound < 0.01


def test_confidence_is_configurable_and_seeded(runs: dict[str, Path]) -> None:
    rules, opts = parse_rules({"ttft_p50": {"max_increase": "10%"}, "confidence": 0.8,
                               "seed": 5, "resamples": 200})
    a = evaluate(runs["base"], runs["rerun"], rules, opts).results[0]
    b = evaluate(runs["base"], runs["rerun"], rules, opts).results[0]
    assert a.bound == b.bound  # seeded
    rules99, opts99 = parse_rules({"ttft_p50": {"max_increase": "10%"}, "confidence": 0.99,
                                   "seed": 5, "resamples": 200})
    c = evaluate(runs["base"], runs["rerun"], rules99, opts99).results[0]
    assert c.bound is not None and a.bound is not None and c.bound < a.bound


def test_weighted_quantile_matches_inverse_cdf() -> None:
    v = np.array([5.0, 1.0, 3.0, 2.0, 4.0])
    tree = np.array([0, 0, 1, 1, 2])
    # weights 1 per tree: plain inverse CDF; the median of 1..5 is 3
    assert _weighted_quantile(v, tree, np.ones((1, 3)), 0.5)[0] == 3.0
    # tree 1 drawn twice (values 2, 3 count double): 1,2,2,3,3,4 → the 0.5 point is 2
    assert _weighted_quantile(v, tree, np.array([[1.0, 2.0, 0.0]]), 0.5)[0] == 2.0


def test_bad_input_exits_2(runs: dict[str, Path], tmp_path: Path) -> None:
    code, out = _gate(str(tmp_path / "missing"), str(runs["base"]))
    assert code == 2 and "results folder not found" in out
    rules = tmp_path / "gate.yaml"
    rules.write_text("ttft_p5O: {max_increase: 10%}\n")
    code, out = _gate(str(runs["base"]), str(runs["base"]), "--rules", str(rules))
    assert code == 2 and "ttft_p5O" in out and "unknown metric" in out
    rules.write_text("ttft_p50: {max_increase: 2pt}\n")
    code, out = _gate(str(runs["base"]), str(runs["base"]), "--rules", str(rules))
    assert code == 2 and "'pt' applies to shares" in out
    rules.write_text("ttft_p50: {max_rise: 10%}\n")
    with pytest.raises(InputError, match="max_rise"):
        load_rules(rules)
    rules.write_text("hit_rate: {max_drop: lots}\n")
    with pytest.raises(InputError, match="threshold"):
        load_rules(rules)


def test_makespan_is_resampled_per_tree(runs: dict[str, Path]) -> None:
    rules, opts = parse_rules({"makespan_p50": {"max_increase": "50%"}})
    r = evaluate(runs["base"], runs["rerun"], rules, opts).results[0]
    assert r.status == "pass" and "resamples" in r.note
    assert r.bound is not None and r.change is not None and r.bound < r.change
