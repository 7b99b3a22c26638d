"""The gate on a real engine (docs/ci.md, "On a real engine"): after one warm-up run that
is discarded, five identical runs of a 10-tree scenario against llama.cpp's llama-server
(the shipped tiny model), and one with the server on 1 thread instead of 2. With three
baseline runs (the run as the unit), identical candidates pass at about the stated rate;
with all five as baselines the 1-thread server fails. How many of the ten baseline
triplets catch it depends on the host's run-to-run spread, so it is printed (docs/ci.md
quotes it) rather than asserted, as are the tree bootstrap's A/A pairs."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from agentbench.engines.locate import find_llama_server, find_llama_vocab
from agentbench.report.gate import evaluate
from agentbench.report.gaterules import load_rules
from tests.helpers import SCENARIOS, free_port
from tests.integration import budget
from tests.integration.engine_run import need, results_dir, run_scenario_on_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

IDENTICAL = 5
#: ten synthetic Codex trees (about 440 requests, ~30 s a run on 2 cores)
TRACE = "trace: {kind: synth, profile: codex, sessions: 10, transform: {scale: 0.005}}\n"


def _scenario(tmp: Path, threads: int) -> Path:
    text = (SCENARIOS / "llama-cpp.yaml").read_text()
    text = text[:text.index("trace:")] + TRACE + text[text.index("load:"):]
    text = text.replace("  max_sessions: 2\n", "  max_sessions: 10\n")
    assert " -t 2 " in text
    text = text.replace(" -t 2 ", f" -t {threads} ")
    path = tmp / f"gate-t{threads}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    need(find_llama_server(), "no llama-server: run `bash scripts/ci_engines.sh llama`")
    need(find_llama_vocab(), "no llama vocab GGUF: run `bash scripts/ci_engines.sh llama`")
    out = results_dir(tmp_path_factory, "gate-llama")
    two, one = _scenario(out, 2), _scenario(out, 1)
    with budget.step("gate-llama", "the gate on llama.cpp (seven runs)"):
        # the first run on a host fresh from other work has been the slowest (CI,
        # 2026-12-04: 8,472 tok/s, then 9,462, 10,410, 10,152, 10,555): it warms the host
        # and is dropped
        run_scenario_on_port(two, out, free_port(), 8091)
        same = [run_scenario_on_port(two, out, free_port(), 8091).run_dir
                for _ in range(IDENTICAL)]
        slow = [run_scenario_on_port(one, out, free_port(), 8091).run_dir]
    return {"same": same, "slow": slow}


def test_three_baselines_pass_identical_runs_and_fail_a_one_thread_server(
        runs: dict[str, list[Path]]) -> None:
    rules, opts = load_rules(None)  # the default rules
    same, slow = runs["same"], runs["slow"][0]
    false_alarms, trials, failed_rules = 0, 0, []
    caught = []
    for base in itertools.combinations(range(IDENTICAL), 3):
        for cand in (i for i in range(IDENTICAL) if i not in base):
            res = evaluate([same[i] for i in base], same[cand], rules, opts)
            trials += 1
            if not res.passed:
                false_alarms += 1
                failed_rules += [r.rule.metric for r in res.results if r.status == "FAIL"]
        res = evaluate([same[i] for i in base], slow, rules, opts)
        caught.append({r.rule.metric: r for r in res.results})
    five = {r.rule.metric: r for r in evaluate(same, slow, rules, opts).results}
    tree_pairs = [evaluate(same[a], same[b], rules, opts).passed
                  for a, b in itertools.combinations(range(IDENTICAL), 2)]
    through = [c["throughput_per_gpu"] for c in caught]
    print(f"\nrun-level, 3 baselines: {false_alarms} of {trials} identical candidates "
          f"failed ({failed_rules}); 1-thread server failed throughput_per_gpu in "
          f"{sum(r.status == 'FAIL' for r in through)} of {len(through)} (drops "
          f"{[round(100 * r.change, 1) for r in through]}%, detectable "
          f"{[round(100 * r.detectable, 1) for r in through]}%); five baselines: "
          f"{five['throughput_per_gpu'].status} (drop "
          f"{100 * five['throughput_per_gpu'].change:.1f}%, detectable "
          f"{100 * five['throughput_per_gpu'].detectable:.1f}%); tree bootstrap, one "
          f"baseline: {tree_pairs.count(False)} of {len(tree_pairs)} identical pairs failed")
    # 20 correlated trials of five rules at 95%: a handful of false alarms is the stated
    # rate; a method that ignores run-to-run spread fails far more of them
    assert false_alarms <= 6, failed_rules
    # five baselines: the bound is t(0.95, 4) x s x sqrt(6/5), about 2.3 standard
    # deviations of the runs (three give 3.4): a ~30% drop stays beyond 5% + bound while
    # the runs' spread is under about 10% (docs/ci.md, "On a real engine")
    assert five["throughput_per_gpu"].status == "FAIL", five["throughput_per_gpu"]
