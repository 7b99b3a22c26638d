"""llama.cpp's llama-server launched by agentbench from scenarios/llama-cpp.yaml, replaying
scaled Weka sessions with subagents; agentbench's figures checked against the server's
own Prometheus counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbench.engines.locate import find_llama_server, find_llama_vocab
from tests.helpers import SCENARIOS, free_port
from tests.integration import budget
from tests.integration.engine_run import (
    EngineRun,
    delta,
    need,
    results_dir,
    run_scenario_on_port,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

SCENARIO = SCENARIOS / "llama-cpp.yaml"
DEFAULT_PORT = 8091


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory: pytest.TempPathFactory, weka_dir: Path) -> EngineRun:
    need(find_llama_server(), "no llama-server: run `bash scripts/ci_engines.sh llama`")
    need(find_llama_vocab(), "no llama vocab GGUF: run `bash scripts/ci_engines.sh llama`")
    with budget.step("llama-cpp", "llama.cpp replaying scenarios/llama-cpp.yaml"):
        return run_scenario_on_port(SCENARIO, results_dir(tmp_path_factory, "llama"),
                                    free_port(), DEFAULT_PORT)


def test_every_request_succeeded_or_carries_its_error(llama_run: EngineRun) -> None:
    r = llama_run.requests
    assert len(r) >= 80  # the two trees: 85 requests
    bad = r[r["status"] != "ok"]
    assert bad["error_type"].notna().all() and bad["error_message"].notna().all()
    assert len(bad) == 0, bad[["session_id", "turn", "error_type", "error_message"]]
    ok = r[r["status"] == "ok"]
    assert ok["prompt_tokens"].notna().all() and ok["cached_tokens"].notna().all()
    assert (ok["completion_tokens"] == ok["expected_output_tokens"]).all()
    info = llama_run.server_info
    assert info["stopped_by"] == "agentbench" and info["exit_status"] is not None
    assert (llama_run.run_dir / "server.log").stat().st_size > 0


def test_hit_rate_from_usage_equals_llama_counters_exactly(llama_run: EngineRun) -> None:
    """llama-server counts prompt tokens reused from the cache and, separately, the
    prompt tokens it processed; usage reports the same split per request."""
    r = llama_run.requests
    b, a = llama_run.before, llama_run.after
    cached_counter = delta(b, a, "llamacpp:prompt_tokens_cached_total")
    processed_counter = delta(b, a, "llamacpp:prompt_tokens_total")
    cached = int(r["cached_tokens"].sum())
    prompt = int(r["prompt_tokens"].sum())
    assert cached_counter == cached
    assert processed_counter == prompt - cached
    assert cached_counter / (cached_counter + processed_counter) == cached / prompt
    assert cached / prompt > 0.5  # agentic sessions reuse most of their context


def test_cached_turns_are_much_faster_than_cold_ones(llama_run: EngineRun) -> None:
    r = llama_run.requests
    ttft = (r["first_token_ns"] - r["sent_ns"]) / 1e6
    share = r["cached_tokens"] / r["prompt_tokens"]
    cold = ttft[(share < 0.1) & (r["prompt_tokens"] >= 500)]
    warm = ttft[(share > 0.9) & (r["prompt_tokens"] >= 500)]
    assert len(cold) >= 3 and len(warm) >= 20, (len(cold), len(warm))
    assert warm.median() * 4 < cold.median(), (warm.median(), cold.median())
