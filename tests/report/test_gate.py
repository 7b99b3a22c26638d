"""The CI gate: identical re-runs pass, a planted 30% TTFT regression fails, a 2% change
under noise passes; bad input exits 2. The paired bootstrap, the detectable change, exact
comparison in virtual time, ``point`` rules, and the comparability fingerprint."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.metrics.bootstrap import (
    TreeData,
    _replicate_fn,
    _weighted_quantile,
    bootstrappable,
    paired_replicates,
    replicates,
)
from agentbench.replay import run as run_replay
from agentbench.report.gate import evaluate, format_markdown, rows
from agentbench.report.gaterules import load_rules, parse_rules
from agentbench.results import schema as R
from agentbench.results.rundir import run_info
from agentbench.scenario.fingerprint import check_comparable, fingerprint, trace_hash
from agentbench.scenario.model import Scenario
from agentbench.testing.demo import write_demo_run
from agentbench.traces.model import Trace
from agentbench.traces.synth.generator import synthesize

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
    # a caught regression carries no "below the detectable change" caveat (that is for a
    # pass that might hide one)
    rules, opts = parse_rules({"ttft_p50": {"max_increase": "0.1%"}})
    caught = evaluate(runs["base"], runs["planted"], rules, opts).results[0]
    assert caught.status == "FAIL" and caught.warning == ""


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


def test_a_rules_file_that_is_no_short_yaml_text_exits_2_in_one_line(
        runs: dict[str, Path], tmp_path: Path) -> None:
    """Exit 1 says a rule regressed. A rules file nested 5,000 deep was a RecursionError
    traceback (exit 1), binary bytes a UnicodeDecodeError, /dev/zero read without end, a
    FIFO without a writer waited forever, and broken YAML spanned lines: each is now one
    line naming the file, exit 2."""
    deep, binary, broken, fifo = (tmp_path / n for n in ("deep.yaml", "bin.yaml",
                                                          "broken.yaml", "fifo.yaml"))
    deep.write_text("[" * 5000 + "]" * 5000)
    binary.write_bytes(b"ttft_p50: \xd2\xff\n")
    broken.write_text("ttft_p50: [1\n")
    os.mkfifo(fifo)
    for path, said in ((deep, "nested more than 64 levels deep"),
                       (binary, "not a text (UTF-8) file: byte 10"),
                       (broken, "expected ',' or ']'"), (fifo, "not a regular file"),
                       (Path("/dev/zero"), "not a regular file"),
                       (tmp_path / "none.yaml", "cannot read rules file")):
        code, out = _gate(str(runs["base"]), str(runs["base"]), "--rules", str(path))
        lines = out.strip().splitlines()
        assert code == 2 and len(lines) == 1 and str(path) in out and said in out, out


def test_a_markdown_path_that_cannot_be_written_exits_2_not_1(runs: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """Exit 1 says a rule regressed: a CI job reads it so. A --markdown in a folder that
    does not exist, or one that is a folder, is bad input (exit 2), after an identical
    re-run that passed every rule (it exited 1 with "No such file or directory")."""
    for md in (tmp_path / "no" / "such" / "gate.md", tmp_path):
        code, out = _gate(str(runs["base"]), str(runs["base"]), "--markdown", str(md))
        assert code == 2, out
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "--markdown" in errors[0] and str(md) in errors[0], out


@pytest.mark.parametrize(("text", "field"), [
    ("ttft_p50: {max_increase: .nan}", "ttft_p50"),    # NaN: a rule that never fails
    ("ttft_p50: {max_increase: .inf}", "ttft_p50"),
    ("ttft_p50: {max_increase: -1}", "ttft_p50"),      # '-5%' is refused: so is -1
    ("ttft_p50: {max_increase: '-5%'}", "ttft_p50"),
    ("seed: -1\nrules: {ttft_p50: {max_increase: 10%}}", "seed"),        # numpy's ValueError
    ("seed: true\nrules: {ttft_p50: {max_increase: 10%}}", "seed"),
    ("resamples: .inf\nrules: {ttft_p50: {max_increase: 10%}}", "resamples"),  # Overflow
    ("resamples: 100000000000\nrules: {ttft_p50: {max_increase: 10%}}", "resamples"),
    ("resamples: 12.7\nrules: {ttft_p50: {max_increase: 10%}}", "resamples"),  # was 12
    ("confidence: '0.9'\nrules: {ttft_p50: {max_increase: 10%}}", "confidence"),
])
def test_rule_file_values_that_cannot_gate_are_bad_input(runs: dict[str, Path],
                                                         tmp_path: Path, text: str,
                                                         field: str) -> None:
    """Each was taken: a NaN threshold passed every run, and a negative seed, an infinite
    or huge resample count ended in a traceback with exit 1, which says a rule regressed."""
    rules = tmp_path / "gate.yaml"
    rules.write_text(text + "\n")
    code, out = _gate(str(runs["base"]), str(runs["plus2"]), "--rules", str(rules),
                      "--markdown", str(tmp_path / "g.md"))
    assert code == 2, out
    assert f"field '{field}'" in out and out.count("\n") == 1, out


def test_makespan_is_resampled_per_tree(runs: dict[str, Path]) -> None:
    rules, opts = parse_rules({"makespan_p50": {"max_increase": "50%"}})
    r = evaluate(runs["base"], runs["rerun"], rules, opts).results[0]
    assert r.status == "pass" and "resamples" in r.note
    assert r.bound is not None and r.change is not None and r.bound < r.change


# --- paired bootstrap ---------------------------------------------------------------

def _td(keys: list[str], ttft: list[list[float]], tokens: list[float],
        busy: list[float]) -> TreeData:
    """A hand-built TreeData: tree k has the TTFTs ttft[k] (all ok), tokens[k] tokens and
    was busy busy[k] s; window 10 s, 1 GPU."""
    tree = np.concatenate([np.full(len(v), k) for k, v in enumerate(ttft)]).astype(np.int64)
    vals = np.concatenate([np.asarray(v, dtype=np.float64) for v in ttft])
    n = len(keys)
    ones = np.bincount(tree, minlength=n).astype(np.float64)
    return TreeData(n_trees=n, tree=tree, ok=np.ones(tree.size, dtype=bool),
                    values={"ttft": vals, "tpot": vals, "e2e": vals},
                    sums={"requests": ones, "ended": ones, "failed": np.zeros(n),
                          "good": ones,
                          "tokens": np.asarray(tokens, dtype=np.float64),
                          "output": np.zeros(n), "ok": ones, "cached": np.zeros(n),
                          "prompt": ones},
                    per_tree={}, window_s=10.0, gpus=1.0, keys=keys,
                    busy_s=np.asarray(busy, dtype=np.float64))


def test_paired_replicates_of_identical_runs_differ_by_nothing() -> None:
    a = _td(["s\x1fa", "s\x1fb", "s\x1fc"], [[10, 20], [100, 300], [1000]], [5, 50, 500],
            [1, 2, 3])
    # the same trees listed in another order: pairing is by key, not by position
    b = _td(["s\x1fc", "s\x1fa", "s\x1fb"], [[1000], [10, 20], [100, 300]], [500, 5, 50],
            [3, 1, 2])
    for name in ("ttft_p50", "ttft_mean", "throughput", "goodput"):
        ra, rb, paired = paired_replicates(a, b, name, 200, 0)
        assert paired == 3
        np.testing.assert_array_equal(ra, rb)
    # resampled independently, the same two runs do differ replicate by replicate
    assert not np.array_equal(replicates(a, "ttft_p50", 200, 0),
                              replicates(b, "ttft_p50", 200, 1))


def test_paired_difference_is_narrower_than_unpaired() -> None:
    """Trees differ from each other 100x (1, 10, 100, ... ms); the candidate is every tree
    +5%: the paired ratio is exactly 1.05 in every replicate, the unpaired one wanders."""
    base = [[10.0 ** k] * 3 for k in range(8)]
    keys = [f"s\x1f{k}" for k in range(8)]
    a = _td(keys, base, [1.0] * 8, [1.0] * 8)
    b = _td(keys, [[x * 1.05 for x in v] for v in base], [1.0] * 8, [1.0] * 8)
    ra, rb, _ = paired_replicates(a, b, "ttft_mean", 500, 3)
    np.testing.assert_allclose(rb / ra, 1.05)
    ua, ub = replicates(a, "ttft_mean", 500, 3), replicates(b, "ttft_mean", 500, 4)
    assert np.std(ub / ua) > 0.1


def test_paired_replicates_use_only_trees_in_both_runs() -> None:
    a = _td(["s\x1fa", "s\x1fb"], [[10], [20]], [1, 1], [1, 1])
    b = _td(["s\x1fb", "s\x1fz"], [[20], [99]], [1, 1], [1, 1])
    ra, rb, paired = paired_replicates(a, b, "ttft_p50", 50, 0)
    assert paired == 1
    assert set(ra) == {20.0} and set(rb) == {20.0}  # only tree b is drawn, in both runs
    # nothing in common: resampled independently, 0 paired
    c = _td(["x\x1fq"], [[5]], [1], [1])
    assert paired_replicates(a, c, "ttft_p50", 50, 0)[2] == 0


def test_rate_replicate_of_the_run_as_it_was_is_tokens_over_window() -> None:
    """Σ tokens / window = (5 + 50 + 500) / 10 = 55.5 tok/s for weights 1, whatever the
    trees' busy times; a tree drawn twice counts its tokens and its busy time twice."""
    td = _td(["s\x1fa", "s\x1fb", "s\x1fc"], [[1], [1], [1]], [5, 50, 500], [1, 2, 3])
    fn = _replicate_fn("throughput")
    assert fn is not None
    assert fn(td, np.ones((1, 3)))[0] == pytest.approx(55.5)
    # weights (0, 0, 3): 1500 tokens in 9 busy s, x occupancy 6 busy s / 10 s = 100 tok/s
    assert fn(td, np.array([[0.0, 0.0, 3.0]]))[0] == pytest.approx(100.0)


# --- virtual time: exact ------------------------------------------------------------

def _virtual(out: Path, rid: str, preset: str = "h100-llama3-8b",
             concurrency: int = 4) -> Path:
    """A small deterministic run: 8 synthetic agents on a simulated cluster in virtual
    time (about 3 s here)."""
    sc = Scenario.model_validate({
        "name": "gate-virtual", "seed": 0,
        "endpoints": [{"kind": "simulated", "name": "sim", "instances": 2, "preset": preset,
                       "router": "session_affinity"}],
        "trace": {"kind": "synth", "profile": "agentx", "sessions": 8,
                  "transform": {"max_context_tokens": 60000}},
        "load": {"kind": "lanes", "concurrency": concurrency},
        "timing": {"time_scale": 0.1},
        "limits": {"max_sessions": 8, "recycle": False},
        "output": {"dir": str(out), "run_id": rid},
        "server_metrics": {"enabled": False},
    })
    return run_replay(sc, progress=False).run_dir


@pytest.fixture(scope="module")
def virtual(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("virtual")
    return {"base": _virtual(root, "base"), "rerun": _virtual(root, "rerun"),
            # the same workload on a slower model (70B instead of 8B per instance)
            "slower": _virtual(root, "slower", preset="h200-llama3-70b"),
            "c2": _virtual(root, "c2", concurrency=2)}


def test_identical_virtual_runs_differ_by_zero_and_pass(virtual: dict[str, Path],
                                                        tmp_path: Path) -> None:
    md = tmp_path / "g.md"
    code, out = _gate(str(virtual["base"]), str(virtual["rerun"]), "--markdown", str(md))
    assert code == 0, out
    res = evaluate(virtual["base"], virtual["rerun"], *load_rules(None))
    assert res.exact
    assert [r.change for r in res.results] == [0.0] * len(res.results)
    assert all(r.status == "pass" and r.detectable == 0.0 for r in res.results)
    assert "compared exactly" in out and "compared exactly" in md.read_text()


def test_slower_virtual_run_fails_the_latency_and_throughput_rules(
        virtual: dict[str, Path], tmp_path: Path) -> None:
    code, out = _gate(str(virtual["base"]), str(virtual["slower"]), "--markdown",
                      str(tmp_path / "g.md"))
    assert code == 1, out
    res = evaluate(virtual["base"], virtual["slower"], *load_rules(None))
    status = {r.rule.metric: r.status for r in res.results}
    assert status == {"ttft_p50": "FAIL", "e2e_p50": "FAIL", "throughput_per_gpu": "FAIL",
                      "hit_rate": "pass", "error_rate": "pass"}, out
    # exact: a rule fails as soon as the change passes its threshold, and not before
    thr = next(r for r in res.results if r.rule.metric == "throughput_per_gpu")
    assert thr.change is not None and thr.bound == thr.change
    rules, opts = parse_rules({"throughput_per_gpu": {"max_drop": f"{100 * thr.change + 0.1}%"}})
    assert evaluate(virtual["base"], virtual["slower"], rules, opts).passed
    rules, opts = parse_rules({"throughput_per_gpu": {"max_drop": f"{100 * thr.change - 0.1}%"}})
    assert not evaluate(virtual["base"], virtual["slower"], rules, opts).passed


def test_point_rules_are_marked_point(runs: dict[str, Path], virtual: dict[str, Path],
                                      tmp_path: Path) -> None:
    rules = tmp_path / "gate.yaml"
    rules.write_text("ttft_p50: {max_increase: 10%}\nschedule_lag_p99: {max_increase: 5}\n"
                     "itl_p50: {max_increase: 10%}\n")
    for base, cand in ((runs["base"], runs["rerun"]), (virtual["base"], virtual["rerun"])):
        md = tmp_path / "g.md"
        _, out = _gate(str(base), str(cand), "--rules", str(rules), "--markdown", str(md))
        lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.strip()}
        assert "(point)" not in lines["ttft_p50"]
        for name in ("schedule_lag_p99", "itl_p50"):
            assert lines[name].split()[1] == "(point)", out
        text = md.read_text()
        assert "| schedule_lag_p99 (point) |" in text and "| itl_p50 (point) |" in text
        assert "| ttft_p50 |" in text
        assert "point: schedule_lag_p99, itl_p50 compared as point values" in text
    # off by default: the built-in rules resample every metric they name
    assert not any(not bootstrappable(r.metric) for r in load_rules(None)[0])


def test_detectable_change_and_warning(runs: dict[str, Path], tmp_path: Path) -> None:
    """A threshold under the detectable change is flagged in the table and the Markdown."""
    rules, opts = parse_rules({"ttft_p50": {"max_increase": "0.1%"},
                               "e2e_p50": {"max_increase": "50%"}})
    res = evaluate(runs["base"], runs["rerun"], rules, opts)
    tight, loose = res.results
    assert tight.detectable is not None and tight.detectable > 0.001
    assert tight.warning and not loose.warning
    md = format_markdown(res, "b", "c")
    assert "ttft_p50: threshold 0.1% is below the detectable change" in md
    row = next(r for r in rows(res) if r[0] == "ttft_p50")
    assert row[6].startswith("±") and row[6].endswith("⚠")


# --- comparability ------------------------------------------------------------------

def test_gate_refuses_incomparable_runs_unless_allowed(virtual: dict[str, Path],
                                                       tmp_path: Path) -> None:
    md = str(tmp_path / "g.md")
    code, out = _gate(str(virtual["base"]), str(virtual["c2"]), "--markdown", md)
    assert code == 2, out
    assert len(out.strip().splitlines()) == 1 and "load" in out and "--allow load" in out
    code, out = _gate(str(virtual["base"]), str(virtual["c2"]), "--allow", "load",
                      "--markdown", md)
    assert code in (0, 1) and "metric" in out
    code, out = _gate(str(virtual["base"]), str(virtual["c2"]), "--allow", "lode")
    assert code == 2 and "unknown field 'lode'" in out
    # docs/ci.md's "--allow all" (once refused as an unknown field)
    code, out = _gate(str(virtual["base"]), str(virtual["c2"]), "--allow", "all",
                      "--markdown", md)
    assert code in (0, 1) and "metric" in out


def test_runs_without_fingerprint_warn(runs: dict[str, Path], virtual: dict[str, Path],
                                       tmp_path: Path) -> None:
    code, out = _gate(str(runs["base"]), str(runs["rerun"]), "--markdown",
                      str(tmp_path / "g.md"))
    assert code == 0
    assert "no fingerprint in run.json" in out
    assert "no fingerprint" in (tmp_path / "g.md").read_text()


def test_a_run_without_sessions_parquet_is_gated_with_a_warning(virtual: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    """Its agents' figures are fallbacks (the summary warns, docs/metrics.md): the gate says
    so too, naming the run, rather than comparing them without a word."""
    cand = tmp_path / "rerun"
    shutil.copytree(virtual["rerun"], cand)
    (cand / R.SESSIONS_FILE).unlink()
    code, out = _gate(str(virtual["base"]), str(cand))
    assert "warning: the candidate rerun: sessions.parquet not found" in out, out
    assert "baseline" not in out.split("sessions.parquet not found")[0].splitlines()[-1]
    code, out = _gate(str(virtual["base"]), str(virtual["rerun"]))
    assert code == 0 and "sessions.parquet" not in out


def test_check_comparable_names_every_differing_field() -> None:
    sc = {"trace": {"filters": {"min_turns": None}, "transform": {"scale": None}},
          "load": {"kind": "lanes", "concurrency": 4}, "limits": {"max_sessions": 8},
          "timing": {"strategy": "think-only"}, "endpoints": [{"kind": "simulated"}]}
    other = {**sc, "load": {"kind": "lanes", "concurrency": 8},
             "endpoints": [{"kind": "openai", "url": "http://x"}]}
    a = {"run_id": "a", "fingerprint": fingerprint(sc, "virtual")}
    b = {"run_id": "b", "fingerprint": fingerprint(sc, "virtual")}
    c = {"run_id": "c", "fingerprint": fingerprint(other, "wall")}
    assert check_comparable([a, b]) == []
    with pytest.raises(InputError) as e:
        check_comparable([a, c])
    msg = e.value.one_line()
    for name in ("load", "time_base", "endpoints"):
        assert name in msg
    for name in ("filters", "transform", "timing"):
        assert f"{name} (" not in msg
    assert check_comparable([a, c], {"load", "endpoint", "time_base"}) == []
    with pytest.raises(InputError, match="endpoints"):
        check_comparable([a, c], {"load", "time_base"})
    # a trace hash on one side only: not refused, said
    a2 = {"run_id": "a2", "fingerprint": {**a["fingerprint"], "trace": "0123"}}
    assert any("trace" in w for w in check_comparable([a2, b]))
    assert "no fingerprint" in check_comparable([a, {"run_id": "old"}])[0]


def _defined_trace_hash(trace: Trace) -> str:
    """``trace_hash`` by its definition (fingerprint version 2; runs recorded since compare
    by it): each turn's ids after the ones it shares with its session's previous turn,
    found element by element."""
    import hashlib
    import json

    h = hashlib.sha256()
    for s in sorted(trace.sessions, key=lambda s: s.session_id):
        h.update(json.dumps([s.session_id, s.parent_id, s.relation, s.parent_turn,
                             s.join_turn, len(s.turns)]).encode())
        prev: list[int] = []
        for t in s.turns:
            ids = [int(x) for x in t.hash_ids]
            k = 0
            while k < min(len(prev), len(ids)) and prev[k] == ids[k]:
                k += 1
            h.update(np.array([t.turn, t.input_tokens, t.output_tokens, t.block_size,
                               len(ids), k], dtype=np.int64).tobytes())
            h.update(np.array(ids[k:], dtype=np.int64).tobytes())
            prev = ids
    return h.hexdigest()[:16]


def test_trace_hash_keeps_its_definition() -> None:
    tr = synthesize("agentx", 4, 2)
    assert trace_hash(tr) == _defined_trace_hash(tr)
    turns = tr.sessions[0].turns
    assert turns[1].hash_ids.base is turns[2].hash_ids.base  # views of one buffer
    whole = trace_hash(tr)
    for t in turns:  # the same ids, each turn a copy of its own: the same hash
        t.hash_ids = t.hash_ids.copy()
    assert trace_hash(tr) == whole
    turns[0].hash_ids = turns[-1].hash_ids[::2]  # a strided view
    turns[1].hash_ids = turns[1].hash_ids.astype(np.int32)  # another width
    assert trace_hash(tr) == _defined_trace_hash(tr)


def test_trace_hash_sees_a_change_inside_a_shared_prefix() -> None:
    """A turn whose ids differ from the previous turn's inside what they would share
    (an agent that rewrote its context) changes the hash, whether the change is at the
    first id, in the middle, or at the last shared one."""
    tr = synthesize("agentx", 2, 0)
    base = trace_hash(tr)
    turns = tr.sessions[0].turns
    n = min(len(turns[1].hash_ids), len(turns[2].hash_ids))
    assert n > 2
    for at in (0, n // 2, n - 1):
        ids = turns[2].hash_ids.copy()
        ids[at] += 1
        kept, turns[2].hash_ids = turns[2].hash_ids, ids
        assert trace_hash(tr) != base, at
        assert trace_hash(tr) == _defined_trace_hash(tr)
        turns[2].hash_ids = kept
    assert trace_hash(tr) == base
    turns[2].hash_ids = turns[2].hash_ids.copy()  # no longer a view: the same content
    assert trace_hash(tr) == base


def test_trace_hashes_of_two_fingerprint_versions_are_not_compared() -> None:
    """A baseline recorded before the hash changed (fingerprint version 1) against a run of
    version 2: their trace hashes differ by definition, so the trace is not compared (a
    warning says so); every other field still is."""
    from agentbench.scenario.fingerprint import VERSION, check_comparable, fingerprint

    sc = {"trace": {"kind": "synth"}, "load": {"kind": "lanes", "concurrency": 4}}
    new = {"run_id": "new", "fingerprint": {**fingerprint(sc, "virtual"), "trace": "aa"}}
    old = {"run_id": "old", "fingerprint": {**new["fingerprint"], "version": 1,
                                            "trace": "bb"}}
    assert VERSION == 2
    warnings = check_comparable([old, new])
    assert any("version 1" in w and "not checked" in w for w in warnings), warnings
    same = {"run_id": "same", "fingerprint": {**new["fingerprint"], "trace": "bb"}}
    with pytest.raises(InputError, match="trace"):
        check_comparable([same, new])  # one version: the hashes are compared
    other_load = {"run_id": "c2", "fingerprint": {
        **old["fingerprint"], "load": {"load": {"kind": "lanes", "concurrency": 8}}}}
    with pytest.raises(InputError, match="load"):
        check_comparable([other_load, new])
    # several runs of version 2 after one of version 1: compared with each other, whatever
    # the order (they were all compared with the first alone, so not at all)
    other = {"run_id": "other", "fingerprint": {**new["fingerprint"], "trace": "cc"}}
    for order in ([old, new, other], [new, old, other], [old, other, new]):
        with pytest.raises(InputError, match=r"trace \((other vs new|new vs other)\)"):
            check_comparable(order)
    again = {"run_id": "again", "fingerprint": {**new["fingerprint"]}}
    assert len(check_comparable([old, new, again])) == 2
    # a fingerprint without a version: said as unknown
    bare = {"run_id": "bare", "fingerprint": {k: v for k, v in new["fingerprint"].items()
                                              if k != "version"}}
    assert any("version 2 in new and unknown in bare" in w
               for w in check_comparable([new, bare]))


def test_float_hash_ids_hash_as_the_integers_they_are() -> None:
    """Hash ids made by hand as floats hash as int64 values do, shared prefix included
    (``[0.5, 1.0]`` then ``[0, 1]`` share both ids once made integers)."""
    from agentbench.traces.model import Session, Trace, Turn

    def trace(first: object) -> Trace:
        turns = [Turn(turn=k, t=0.0, think_s=0.0, api_s=None, input_tokens=64,
                      output_tokens=1, hash_ids=ids, block_size=16)  # type: ignore[arg-type]
                 for k, ids in enumerate([first, np.array([0, 1], dtype=np.int64)])]
        return Trace([Session(session_id="s", parent_id=None, relation="root",
                              parent_turn=None, join_turn=None, model=None, source="t",
                              scope="s", start_s=0.0, turns=turns)])

    floats = trace(np.array([0.5, 1.0]))
    ints = trace(np.array([0, 1], dtype=np.int64))
    assert trace_hash(floats) == _defined_trace_hash(floats) == trace_hash(ints)


def test_trace_hash_is_deterministic_and_sees_token_counts(tmp_path: Path) -> None:
    t1 = synthesize("agentx", 3, 0)
    t2 = synthesize("agentx", 3, 0)
    assert trace_hash(t1) == trace_hash(t2)
    t2.sessions[0].turns[0].output_tokens += 1
    assert trace_hash(t1) != trace_hash(t2)
    assert trace_hash(t1) != trace_hash(synthesize("agentx", 3, 1))
    sc = Scenario.model_validate({
        "name": "fp",
        "endpoints": [{"kind": "openai", "url": "http://u:secret@h:1", "model": "m",
                       "headers": {"Authorization": "Bearer sk-t0ken"}}],
        "trace": {"kind": "synth", "profile": "agentx", "sessions": 3},
        "load": {"kind": "lanes", "concurrency": 2}, "limits": {"max_sessions": 3}})
    info = run_info(sc, ("sk-t0ken",), tmp_path, trace=t1)
    fp = info["fingerprint"]
    assert fp["trace"] == trace_hash(t1)
    assert fp["endpoints"] == ["openai"] and fp["time_base"] == "wall"
    assert fp["load"]["load"] == {"kind": "lanes", "concurrency": 2}
    assert "secret" not in str(fp) and "sk-t0ken" not in str(fp) and "http" not in str(fp)


def test_a_run_that_served_nothing_is_not_passed(runs: dict[str, Path],
                                                 tmp_path: Path) -> None:
    """A run with no successful measured request once passed its own gate with every rule
    n/a (exit 0). A candidate without one is a regression (exit 1), said in the table and
    in gate.md for the PR comment (it was exit 2 with no gate.md: a change that broke
    serving left the comment silent); a baseline without one is nothing to gate against
    (exit 2)."""
    from tests.helpers import req, write_run

    empty = write_run(tmp_path / "empty", [
        req(status="error", error_type="http_500", http_status=500, sent_ns=0, end_ns=1),
        req(status="error", error_type="http_500", http_status=500, sent_ns=2, end_ns=3),
        req(status="error", error_type="timeout", sent_ns=4, end_ns=5)])
    md = tmp_path / "g.md"
    code, out = _gate(str(runs["base"]), str(empty), "--markdown", str(md))
    why = ("the candidate has no successful measured request (3 of 3 failed: http_500 x2, "
           "timeout x1): no rule could be checked")
    assert code == 1 and f"REGRESSION: {why}" in out.splitlines(), out
    text = md.read_text()
    assert text.startswith("### agentbench gate: ❌ regression") and why in text, text
    code, out = _gate(str(empty), str(empty))
    assert code == 2 and "the baseline has no successful measured request" in out


def test_several_baselines_make_the_run_the_unit(runs: dict[str, Path],
                                                 tmp_path: Path) -> None:
    md = tmp_path / "g.md"
    code, out = _gate(str(runs["base"]), str(runs["rerun"]), str(runs["plus2"]),
                      str(runs["planted"]), "--markdown", str(md))
    assert code == 1, out
    ttft = next(line for line in out.splitlines() if line.startswith("ttft_p50"))
    assert "FAIL" in ttft
    assert "mean of 3 baseline runs" in out
    code, out = _gate(str(runs["base"]), str(runs["planted"]), str(runs["rerun"]),
                      "--markdown", str(md))
    # a baseline that itself moved 30% widens the run-to-run spread: a clean candidate
    # passes, and the detectable change says how little such baselines can tell
    assert code == 0, out
    assert "baseline runs: a change near the threshold is not caught" in out
    rules, opts = parse_rules({"ttft_p50": {"max_increase": "5%"},
                               "itl_p50": {"max_increase": "5%"}})
    res = evaluate([runs["base"], runs["rerun"]], runs["plus2"], rules, opts)
    assert res.baselines == 2
    assert all(not r.point and r.detectable is not None for r in res.results)
    assert "2 baseline runs" in res.results[0].note


def test_the_run_level_bound_is_the_t_prediction_interval() -> None:
    from agentbench.report.gate import run_level
    from agentbench.report.gaterules import Rule

    rule = Rule("ttft_p50", "max_increase", "rel", 0.0, "max_increase: 0%")
    # changes against the mean 100: 0, +2%, -2%; s = 2%; t(0.95, 2) = 2.920; sqrt(4/3)
    assert run_level(rule, [100.0, 102.0, 98.0], 0.95) == pytest.approx(
        2.919986 * 0.02 * (4 / 3) ** 0.5, rel=1e-5)
    drop = Rule("throughput", "max_drop", "pt", 0.0, "max_drop: 0pt")
    assert run_level(drop, [0.5, 0.5, 0.5], 0.95) == 0.0


def test_identical_candidates_fail_at_the_stated_rate() -> None:
    """Draws of k baseline runs and one identical candidate, run to run noise of 3%: a
    zero-threshold rule fails in 1 - confidence of trials; a 10% regression against a 5%
    threshold on 1% noise is caught in most (85% measured with three baselines: the
    spread of three runs is itself uncertain, which the t bound pays for)."""
    from agentbench.report.gate import _change, run_level
    from agentbench.report.gaterules import Rule

    rule = Rule("ttft_p50", "max_increase", "rel", 0.0, "max_increase: 0%")
    rng = np.random.default_rng(7)
    for k in (2, 3, 5):
        fails = 0
        for _ in range(4000):
            v = rng.normal(100, 3, k + 1)
            base = list(v[:k])
            change = float(_change(rule, np.mean(base), v[k]))
            fails += change - run_level(rule, base, 0.95) > rule.threshold
        assert 0.035 < fails / 4000 < 0.065, (k, fails)
    caught = 0
    for _ in range(1000):
        base = list(rng.normal(100, 1, 3))
        change = float(_change(rule, np.mean(base), rng.normal(110, 1)))
        caught += change - run_level(rule, base, 0.95) > 0.05
    assert 800 < caught < 950


def test_a_run_that_did_not_complete_is_no_whole_run_to_gate(runs: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """A candidate killed 2 s in once "improved" its TTFT by half and failed only on
    throughput; two killed runs passed each other. Either side that did not complete is
    refused, naming which and how it ended (exit 2)."""
    import json
    import shutil

    from agentbench.results import schema as R

    cut = tmp_path / "cut"
    shutil.copytree(runs["rerun"], cut)
    (cut / "summary.json").unlink(missing_ok=True)
    info = json.loads((cut / R.RUN_FILE).read_text())
    info["status"] = "killed"
    (cut / R.RUN_FILE).write_text(json.dumps(info))
    code, out = _gate(str(runs["base"]), str(cut))
    assert code == 2, out
    assert "the candidate is no whole run to gate: the run did not complete (status: " \
           "killed)" in " ".join(out.split())
    code, out = _gate(str(cut), str(runs["base"]))
    assert code == 2 and "the baseline is no whole run" in " ".join(out.split())
    code, _ = _gate(str(runs["base"]), str(runs["rerun"]))  # the whole runs still gate
    assert code == 0


def test_a_folder_without_run_json_is_no_run_to_gate(runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """A copy of a run without its run.json: the summary left in it counted the run's
    GPUs, the figures resampled from its rows counted one, and an identical re-run
    failed throughput/GPU. Now it is one line, exit 2, as any bad input."""
    copy = tmp_path / "copy"
    shutil.copytree(runs["base"], copy)
    (copy / R.RUN_FILE).unlink()
    code, out = _gate(str(runs["base"]), str(copy), "--markdown", str(tmp_path / "g.md"))
    assert code == 2, out
    assert "no run.json" in out and out.count("\n") == 1, out


@pytest.mark.parametrize("run_json", ["{}", '{"status": "completed"}'])
def test_a_run_json_that_names_no_scenario_is_no_run_to_gate(runs: dict[str, Path],
                                                             tmp_path: Path,
                                                             run_json: str) -> None:
    """A run.json of ``{}`` gave the gate one GPU and a false throughput/GPU regression
    (exit 1) on an identical copy: every run.json agentbench writes names its scenario."""
    copy = tmp_path / "copy"
    shutil.copytree(runs["base"], copy)
    (copy / R.RUN_FILE).write_text(run_json)
    code, out = _gate(str(runs["base"]), str(copy))
    assert code == 2, out
    assert "names no scenario" in out and out.count("\n") == 1, out
    code, out = _gate(str(copy), str(runs["base"]))
    assert code == 2 and "names no scenario" in out, out


def test_a_summary_older_than_its_run_json_is_computed_again(runs: dict[str, Path],
                                                             tmp_path: Path) -> None:
    """run.json edited after the summary (its GPUs, say) makes the summary stale:
    ``load`` computes it again, as it does for newer rows."""
    import json
    import os

    import agentbench

    copy = tmp_path / "copy"
    shutil.copytree(runs["base"], copy)
    before = agentbench.load(copy).summary["overall"]["throughput"]["per_gpu_total_tok_s"]
    info = json.loads((copy / R.RUN_FILE).read_text())
    gpus = info["scenario"]["hardware"]["gpus"]
    info["scenario"]["hardware"]["gpus"] = 2 * gpus
    (copy / R.RUN_FILE).write_text(json.dumps(info))
    later = (copy / R.SUMMARY_FILE).stat().st_mtime + 5
    os.utime(copy / R.RUN_FILE, (later, later))
    after = agentbench.load(copy).summary["overall"]["throughput"]["per_gpu_total_tok_s"]
    assert after == pytest.approx(before / 2)


def test_a_relative_rule_from_a_baseline_of_zero_is_not_passed_as_n_a(tmp_path: Path) -> None:
    """``error_rate: {max_increase: 10%}`` with no failure in the baseline and a third of
    the candidate's requests failed once read n/a ("value missing in a run") and the gate
    passed. A rise from 0 now fails a relative rule; 0 in both runs passes."""
    small = {"trees": 6, "turns": 4, "concurrency": (2,), "warmup": 0}
    base = write_demo_run(tmp_path / "base", seed=1, fail_rate=0.0, **small)  # type: ignore[arg-type]
    worse = write_demo_run(tmp_path / "worse", seed=1, fail_rate=0.3, **small)  # type: ignore[arg-type]
    rules, opts = parse_rules({"error_rate": {"max_increase": "10%"}})
    res = evaluate(base, worse, rules, opts)
    (r,) = res.results
    assert r.base == 0.0 and r.cand is not None and r.cand > 0
    assert r.status == "FAIL" and not res.passed
    assert rows(res)[0][4] == "+∞"
    code, out = _gate(str(base), str(worse), "--rules", str(_rules_file(tmp_path)),
                      "--markdown", str(tmp_path / "g.md"))
    assert code == 1 and "REGRESSION" in out, out
    same = evaluate(base, base, rules, opts)
    assert same.passed and same.results[0].status == "pass"
    assert same.results[0].change == 0.0


def _rules_file(tmp_path: Path) -> Path:
    p = tmp_path / "gate.yaml"
    p.write_text("error_rate: {max_increase: 10%}\n")
    return p


def test_requests_cancelled_by_the_run_are_no_failures_in_the_resampled_error_rate(
        tmp_path: Path) -> None:
    """A wall-clock candidate whose deadline cancelled more requests than the baseline's
    (a slower server has more in flight at the deadline) read error rate 0.0% → 0.0%,
    regression +0.00pt, lower bound +26pt: FAIL. The replicates counted cancelled
    requests as failures (and in goodput's denominator), which the summary does not."""
    small = {"trees": 12, "turns": 6, "concurrency": (4,), "warmup": 0}
    base = write_demo_run(tmp_path / "base", seed=1, fail_rate=0.0, **small)  # type: ignore[arg-type]
    cand = tmp_path / "cand"
    shutil.copytree(base, cand)
    t = pq.read_table(cand / R.REQUESTS_FILE)
    turn = t["turn"].to_numpy()
    tree = t["tree_id"].to_pylist()
    # the last two turns of half the trees were cut by the run's deadline
    cut = [k >= 4 and int(str(tid)[1:].split("#")[0]) % 2 == 0  # tree ids s<k>#0
           for k, tid in zip(turn, tree, strict=True)]
    status = [R.CANCELLED if c else s for c, s in zip(cut, t["status"].to_pylist(),
                                                         strict=True)]
    t = t.set_column(t.schema.get_field_index("status"), "status",
                     pa.array(status, t.schema.field("status").type))
    pq.write_table(t, cand / R.REQUESTS_FILE)
    (cand / R.SUMMARY_FILE).unlink(missing_ok=True)
    rules, opts = parse_rules({"error_rate": {"max_increase": "1pt"},
                               "goodput": {"max_drop": "2pt"}})
    res = evaluate(base, cand, rules, opts)
    err, good = res.results
    assert err.base == 0.0 and err.cand == 0.0
    assert err.status == "pass" and err.bound is not None and abs(err.bound) < 1e-9
    assert good.change is not None and good.bound is not None
    assert good.bound <= good.change + 0.05, rows(res)


def test_a_baseline_given_twice_is_refused_not_counted_twice(runs: dict[str, Path],
                                                             tmp_path: Path) -> None:
    """``gate A A/ C``: one baseline run counted as two identical re-runs, so the spread
    between runs was 0, a rule's interval shrank to its point (detectable ±0.0%) and a
    +0.7% change failed a 0.5% rule as certain (exit 1), which the one baseline alone
    passes (its lower bound -5.1%). A candidate among several baselines (``gate A B A``)
    is refused too. A run gated against itself alone still passes."""
    rules = tmp_path / "r.yaml"
    rules.write_text("ttft_p50: {max_increase: 0.5%}\n")
    md = str(tmp_path / "g.md")
    base, rerun, plus2 = (str(runs[k]) for k in ("base", "rerun", "plus2"))
    for args in ([base, base + "/", plus2], [base, rerun, base]):
        code, out = _gate(*args, "--rules", str(rules), "--markdown", md)
        assert code == 2 and len(out.strip().splitlines()) == 1, out
        assert "given twice" in out and "the run is the unit of several baselines" in out
    assert _gate(base, plus2, "--rules", str(rules), "--markdown", md)[0] == 0
    code, out = _gate(base, base, "--markdown", md)
    assert code == 0 and "+0.0%" in out


def test_a_run_gated_against_itself_passes_with_a_warning(runs: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """``gate A A`` (or ``A`` and ``A/``, or a link to it) passes, every change +0.0%, as
    before; it said nothing of both sides being one run folder. Now one warning line says
    so, under the table and in the Markdown; two distinct runs get none."""
    base = runs["base"]
    (tmp_path / "link").symlink_to(base)
    md = tmp_path / "g.md"
    for cand in (str(base), f"{base}/", str(tmp_path / "link")):
        code, out = _gate(str(base), cand, "--markdown", str(md))
        same = [ln for ln in out.splitlines() if "the same run folder" in ln]
        assert code == 0 and len(same) == 1 and same[0].startswith("warning: "), out
        assert str(base) in same[0] and "every change is zero" in same[0]
        assert "the same run folder" in md.read_text()
    code, out = _gate(str(base), str(runs["rerun"]), "--markdown", str(md))
    assert code == 0 and "same run folder" not in out + md.read_text(), out


@pytest.mark.parametrize(("rule", "better"), [("ttft_p50: {max_drop: 10%}", "lower"),
                                              ("throughput_per_gpu: {max_increase: 5%}",
                                               "higher"),
                                              ("error_rate: {max_drop: 1pt}", "lower")])
def test_a_rule_against_its_metrics_own_direction_is_one_line(
        runs: dict[str, Path], tmp_path: Path, rule: str, better: str) -> None:
    """``ttft_p50: {max_drop: 10%}`` failed a candidate whose P50 TTFT was 10x lower as a
    REGRESSION (+90.1%, exit 1), where the report calls the same change better: a rule
    that fails on an improvement is refused, one line, exit 2, naming the metric and the
    key to use. Figures of the workload (not judged) take either key."""
    rules = tmp_path / "gate.yaml"
    rules.write_text(rule + "\n")
    code, out = _gate(str(runs["base"]), str(runs["planted"]), "--rules", str(rules))
    metric = rule.split(":")[0]
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert f"field '{metric}'" in out and f"a {better} {metric} is better" in out, out
    assert parse_rules({"hit_rate_potential": {"max_increase": "1pt"},
                        "api_cost": {"max_drop": "5%"}})[0]


def _without_usage(src: Path, dst: Path) -> Path:
    """A copy of ``src`` whose server reported no usage: no hit rate can be computed."""
    shutil.copytree(src, dst)
    t = pq.read_table(dst / R.REQUESTS_FILE)
    for col in ("prompt_tokens", "cached_tokens"):
        i = t.schema.get_field_index(col)
        t = t.set_column(i, col, pa.nulls(len(t), t.schema.field(col).type))
    pq.write_table(t, dst / R.REQUESTS_FILE)
    (dst / R.SUMMARY_FILE).unlink(missing_ok=True)
    return dst


def test_a_rule_left_n_a_is_said_and_a_gate_that_checked_nothing_is_refused(
        runs: dict[str, Path], tmp_path: Path) -> None:
    """A candidate whose server stopped reporting usage has no hit rate: its hit-rate rule
    read n/a, and the verdict "PASS: 0 of 2 rules failed" (Markdown: "no regression")
    said nothing of the rule it had not checked, nor of which run lacked the value; with
    only such rules the gate passed having checked nothing (exit 0), where a run that
    served nothing is refused. The verdict now counts the rules not checked, a note names
    each and the run without its value, and a gate where no rule could be checked is one
    line, exit 2."""
    import yaml

    cand = _without_usage(runs["base"], tmp_path / "nousage")
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump({"rules": {"hit_rate": {"max_drop": "2pt"},
                                             "ttft_p50": {"max_increase": "10%"}}}))
    md = tmp_path / "g.md"
    code, out = _gate(str(runs["base"]), str(cand), "--rules", str(two), "--markdown", str(md))
    assert code == 0, out
    assert "n/a: hit_rate: no value in the candidate: not checked" in out, out
    assert "PASS: 0 of 2 rules failed, 1 not checked (n/a);" in out, out
    assert "n/a: hit_rate: no value in the candidate: not checked" in md.read_text()
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"rules": {"hit_rate": {"max_drop": "2pt"}}}))
    code, out = _gate(str(runs["base"]), str(cand), "--rules", str(one), "--markdown", str(md))
    assert code == 2 and out.count("\n") == 1, out
    assert "no rule could be checked: hit_rate has no value in the candidate" in out, out
