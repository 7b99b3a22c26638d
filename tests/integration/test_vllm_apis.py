"""vLLM (CPU) serving the Responses (``/v1/responses``) and Messages (``/v1/messages``) APIs
to a replay of one Claude Code session tree, on one server after a chat replay of the same
work: every request succeeds, prompt tokens are the trace's (read from ``input_tokens``,
and for Messages ``input_tokens + cache_read_input_tokens``), cached tokens are reported
and agree with chat's, and TTFT is stamped at the first output event."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from agentbench.engines.locate import find_vllm_python
from tests.helpers import SCENARIOS, free_port
from tests.integration import budget
from tests.integration.engine_run import need, results_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

DEFAULT_PORT = 8092
BLOCK = 32


@pytest.fixture(scope="module")
def api_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    need(find_vllm_python(), "no vLLM CPU install: run `bash scripts/ci_engines.sh vllm`")
    from agentbench.engines import serving
    from agentbench.replay import run as replay_run
    from agentbench.scenario.loading import load_scenario

    path = SCENARIOS / "vllm-cpu.yaml"
    sc = load_scenario(path)
    old, new = str(DEFAULT_PORT), str(free_port())
    assert sc.server is not None and isinstance(sc.server.command, str)
    sc.server.command = sc.server.command.replace(old, new)
    sc.server.health_url = sc.server.health_url.replace(old, new)
    ep = sc.endpoints[0]
    ep.url = ep.url.replace(old, new)  # type: ignore[union-attr]
    sc.trace.filters.sessions = ["trace_0291"]  # type: ignore[union-attr]
    sc.limits.max_sessions = 1
    sc.load.concurrency = 1  # type: ignore[union-attr]
    out = results_dir(tmp_path_factory, "vllm-apis")
    runs: dict[str, pd.DataFrame] = {}
    with budget.step("vllm-apis", "vLLM serving chat, Responses and Messages"), \
            serving(sc, path) as adopt:
        for api in ("chat", "responses", "messages"):
            # each API sees the same prompts: its own salt keeps the earlier API's cached
            # blocks from serving it (each replay starts cold, as the chat one did)
            variant = sc.model_copy(deep=True)
            variant.endpoints[0].api = api  # type: ignore[union-attr]
            variant.seed = {"chat": 0, "responses": 1, "messages": 2}[api]
            variant.output.dir = str(out)
            variant.output.run_id = api
            res = replay_run(variant, progress=False, on_start=adopt)
            runs[api] = pd.read_parquet(Path(res.run_dir) / "requests.parquet").sort_values(
                ["session_id", "turn"]).reset_index(drop=True)
    return runs


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_vllm_serves_the_api_with_the_traces_prompts(api_runs: dict[str, pd.DataFrame],
                                                     api: str) -> None:
    chat, got = api_runs["chat"], api_runs[api]
    assert len(got) == len(chat) >= 30
    bad = got[got.status != "ok"]
    assert len(bad) == 0, bad[["turn", "error_type", "error_message"]].head().to_dict()
    # prompt-count calibration made the prompts the trace's (vLLM's template aside)
    assert ((got.prompt_tokens - got.expected_input_tokens).abs() <= 3).all()
    assert got.prompt_tokens.tolist() == chat.prompt_tokens.tolist()
    # cached tokens come from where the API reports them, whole blocks, mostly reused
    assert got.cached_tokens.notna().all() and (got.cached_tokens % BLOCK == 0).all()
    assert got.cached_tokens.sum() > 0.5 * got.prompt_tokens.sum()
    assert (got.cached_tokens - chat.cached_tokens).abs().max() <= 2 * BLOCK
    ttft = got.first_token_ns - got.sent_ns
    assert (ttft > 0).all() and (got.end_ns >= got.first_token_ns).all()
    if api == "responses":  # ignore_eos is a field of vLLM's Responses request
        assert (got.completion_tokens == got.expected_output_tokens).all()
    else:  # vLLM's Messages request has no ignore_eos: the model may stop early
        assert (got.completion_tokens <= got.expected_output_tokens).all()
        assert (got.token_events >= 1).all()
