"""vLLM (CPU) launched by agentbench from scenarios/vllm-cpu.yaml, replaying scaled Weka
sessions with subagents; agentbench's figures checked against vLLM's own metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentbench.engines.locate import find_vllm_python
from tests.helpers import SCENARIOS, free_port
from tests.integration import budget
from tests.integration.engine_run import (
    EngineRun,
    delta,
    need,
    results_dir,
    run_scenario_on_port,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

SCENARIO = SCENARIOS / "vllm-cpu.yaml"
DEFAULT_PORT = 8092
BLOCK = 32  # --block-size in the scenario (the CPU attention wants multiples of 32)
LABELS = {"model_name": "tiny-llama"}


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory: pytest.TempPathFactory, weka_dir: Path) -> EngineRun:
    need(find_vllm_python(), "no vLLM CPU install: run `bash scripts/ci_engines.sh vllm`")
    with budget.step("vllm-cpu", "vLLM replaying scenarios/vllm-cpu.yaml"):
        return run_scenario_on_port(SCENARIO, results_dir(tmp_path_factory, "vllm"),
                                    free_port(), DEFAULT_PORT)


def test_every_request_succeeded_or_carries_its_error(vllm_run: EngineRun) -> None:
    r = vllm_run.requests
    assert len(r) >= 80  # the two trees: 85 requests
    bad = r[r["status"] != "ok"]
    assert bad["error_type"].notna().all() and bad["error_message"].notna().all()
    assert len(bad) == 0, bad[["session_id", "turn", "error_type", "error_message"]]
    ok = r[r["status"] == "ok"]
    assert ok["prompt_tokens"].notna().all() and ok["cached_tokens"].notna().all()
    assert (ok["completion_tokens"] == ok["expected_output_tokens"]).all()
    assert vllm_run.server_info["stopped_by"] == "agentbench"
    assert vllm_run.server_info["exit_status"] is not None


def test_prompt_tokens_match_the_trace(vllm_run: EngineRun) -> None:
    """The tiny model's tokenizer has one token per synthetic word, so vLLM counts what
    the trace asked for plus its chat template (2 tokens per message + 1 reply primer)."""
    ok = vllm_run.requests[vllm_run.requests["status"] == "ok"]
    assert ((ok["prompt_tokens"] - ok["expected_input_tokens"]).abs() <= 3).all()


def test_hit_rate_from_usage_matches_vllm_counters(vllm_run: EngineRun) -> None:
    r = vllm_run.requests
    hits = delta(vllm_run.before, vllm_run.after, "vllm:prefix_cache_hits_total", **LABELS)
    queries = delta(vllm_run.before, vllm_run.after, "vllm:prefix_cache_queries_total",
                    **LABELS)
    cached = float(r["cached_tokens"].sum())
    prompt = float(r["prompt_tokens"].sum())
    n = len(r)
    # usage reports whole blocks; the scheduler's counters may differ by < 1 block/request
    assert abs(hits - cached) <= n * BLOCK, (hits, cached)
    assert abs(queries - prompt) <= n * BLOCK, (queries, prompt)
    usage_rate, server_rate = cached / prompt, hits / queries
    assert abs(usage_rate - server_rate) <= n * BLOCK / prompt
    assert usage_rate > 0.5  # agentic sessions reuse most of their context
    assert (r["cached_tokens"] % BLOCK == 0).all()


def _bucket_of_median(before: dict, after: dict) -> tuple[float, float]:  # type: ignore[type-arg]
    """(lower, upper] edges of the vLLM TTFT histogram bucket holding the median of the
    requests observed during the run (bucket counts differenced over the run)."""
    name = "vllm:time_to_first_token_seconds_bucket"
    les = sorted({float(dict(lab)["le"]) for (n, lab) in after if n == name})
    counts = np.array([delta(before, after, name, le=_le(x), **LABELS) for x in les])
    half = counts[-1] / 2
    i = int(np.searchsorted(counts, half, side="left"))
    lower = les[i - 1] if i > 0 else 0.0
    return lower, les[i]


def _le(x: float) -> str:
    return "+Inf" if x == float("inf") else repr(x)


def test_ttft_p50_falls_in_vllm_own_ttft_bucket(vllm_run: EngineRun) -> None:
    r = vllm_run.requests
    count = delta(vllm_run.before, vllm_run.after, "vllm:time_to_first_token_seconds_count",
                  **LABELS)
    assert count == len(r)  # the histogram saw exactly the run's requests
    lower, upper = _bucket_of_median(vllm_run.before, vllm_run.after)
    ttft_s = (r["first_token_ns"] - r["sent_ns"]) / 1e9
    p50 = float(np.percentile(ttft_s, 50))
    # the client's TTFT includes HTTP and SSE overhead on loopback (a few ms) on top of
    # vLLM's arrival-to-first-token time, so it may only sit at or above the server's
    assert lower <= p50 <= upper + 0.02, (lower, p50, upper)


def test_cached_turns_are_much_faster_than_cold_ones(vllm_run: EngineRun) -> None:
    r = vllm_run.requests
    ttft = (r["first_token_ns"] - r["sent_ns"]) / 1e6
    share = r["cached_tokens"] / r["prompt_tokens"]
    cold = ttft[(share < 0.1) & (r["prompt_tokens"] >= 500)]
    warm = ttft[(share > 0.9) & (r["prompt_tokens"] >= 500)]
    assert len(cold) >= 3 and len(warm) >= 20, (len(cold), len(warm))
    assert warm.median() * 4 < cold.median(), (warm.median(), cold.median())
