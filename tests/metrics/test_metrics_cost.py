"""Cost on hand-built records, the arithmetic written out (docs/metrics.md, Cost): the API
figure bills the provider's own prompt cache (never the self-hosted server's hits), $/agent
counts every agent that ran (cut or failed ones pro-rated), $/Mtok is over all tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentbench.metrics import format_summary, summarize
from agentbench.metrics.cost import api_cached_input_tokens, cost_block
from agentbench.scenario.model import Prices
from tests.helpers import MS, PRICES, hand_scenario, req, sess, write_run


def done(turn: int, t_ms: int, prompt: int, cached: int | None, potential: int,
         output: int = 10, **kw: Any) -> dict[str, Any]:
    """A successful request sent at t_ms, ended 100 ms later."""
    return req(turn=turn, scheduled_ns=t_ms * MS, sent_ns=t_ms * MS,
               first_token_ns=(t_ms + 10) * MS, last_token_ns=(t_ms + 90) * MS,
               end_ns=(t_ms + 100) * MS, prompt_tokens=prompt, completion_tokens=output,
               cached_tokens=cached, expected_input_tokens=prompt,
               potential_cached_tokens=potential, **kw)


def agent_run(d: Path, cached: tuple[int, int], **prices: Any) -> Path:
    """One agent of two turns: 1,000 then 3,000 input tokens, 10 output each; the trace's
    potential hit on turn 1 is 1,000 (turn 0's prompt). ``cached``: what the self-hosted
    server reported for each turn. Window 0 → 1,100 ms."""
    reqs = [done(0, 0, 1000, cached[0], 0), done(1, 1000, 3000, cached[1], 1000)]
    sessions = [sess(turns_planned=2, turns_done=2, makespan_ns=1100 * MS)]
    return write_run(d, reqs, sessions, scenario=hand_scenario("cost", prices=prices))


def test_api_cost_ignores_the_self_hosted_cache(tmp_path: Path) -> None:
    # the same trace; a cache-blind router (0 hits) vs a shared tier (every potential hit)
    blind = summarize(agent_run(tmp_path / "blind", (0, 0)))["overall"]["cost"]
    shared = summarize(agent_run(tmp_path / "shared", (0, 1000)))["overall"]["cost"]
    # the API's own cache: the trace's potential, 1,000 of 4,000 input tokens
    # API = (3,000 x $3 + 1,000 x $0.3 + 20 x $15) / 1e6 = (9,000 + 300 + 300) / 1e6
    for c in (blind, shared):
        assert c["api_equivalent_usd"] == pytest.approx(0.0096)
        api = c["api"]
        assert api["cache_model"] == "potential"
        assert api["cache_hit_rate"] == pytest.approx(0.25)
        assert api["tokens"] == {"input_cached": 1000, "input_uncached": 3000, "output": 20}
        assert api["usd"] == pytest.approx({"input_cached": 0.0003, "input_uncached": 0.009,
                                            "output": 0.0003})
        assert api["prices"] == PRICES
        # self-hosted = $0.002/s x 1.1 s = $0.0022; ratio = 0.0096 / 0.0022
        assert c["self_hosted_usd"] == pytest.approx(0.0022)
        assert c["api_over_self_hosted"] == pytest.approx(0.0096 / 0.0022)
        # API $/Mtok over all 4,020 tokens
        assert c["api_per_mtok_usd"] == pytest.approx(0.0096 * 1e6 / 4020)
    assert blind["api"] == shared["api"]
    # the self-hosted token split does follow the server: what it served from cache
    assert blind["tokens"]["input_cached"] == 0 and shared["tokens"]["input_cached"] == 1000


def test_provider_cache_models(tmp_path: Path) -> None:
    none = summarize(agent_run(tmp_path / "none", (0, 1000), api_cache="none"))
    c = none["overall"]["cost"]
    # no provider cache: (4,000 x $3 + 20 x $15) / 1e6 = $0.0123
    assert c["api"]["cache_model"] == "none" and c["api"]["cache_hit_rate"] == 0
    assert c["api_equivalent_usd"] == pytest.approx(0.0123)
    rate = summarize(agent_run(tmp_path / "rate", (0, 0), api_cache={"hit_rate": 0.9}))
    c = rate["overall"]["cost"]
    # 90% of 4,000 cached: (400 x $3 + 3,600 x $0.3 + 20 x $15) / 1e6 = (1,200 + 1,080 +
    # 300) / 1e6 = $0.00258
    assert c["api"]["cache_model"] == "hit_rate"
    assert c["api"]["tokens"]["input_cached"] == pytest.approx(3600)
    assert c["api_equivalent_usd"] == pytest.approx(0.00258)
    assert rate["run"]["prices"]["api_cache"] == {"hit_rate": 0.9}
    with pytest.raises(ValueError, match="less than or equal to 1"):
        Prices.model_validate({**PRICES, "api_cache": {"hit_rate": 1.5}})
    with pytest.raises(ValueError, match="'potential' or 'none'"):
        Prices.model_validate({**PRICES, "api_cache": "achieved"})


def test_potential_follows_the_servers_token_count() -> None:
    # a server that counts 1,100 prompt tokens where the trace says 1,000, potential 800:
    # billed cached = 1,100 x 800 / 1,000 = 880; a request with no expected input: 0;
    # potential never above the input (share capped at 1)
    cached = api_cached_input_tokens(
        PRICES, input_tokens=np.array([1100.0, 50.0, 10.0]),
        potential=np.array([800.0, 0.0, 30.0]), expected_input=np.array([1000.0, 0.0, 10.0]))
    assert cached == pytest.approx(880 + 0 + 10)
    assert api_cached_input_tokens(None, np.ones(1), np.ones(1), np.ones(1)) == 0


def test_agents_pro_rated(tmp_path: Path) -> None:
    reqs = [
        # t#0 completed: 2 of 2 turns
        done(0, 0, 100, 0, 0), done(1, 200, 100, 0, 0),
        # u#0 cut by the run's bound: 1 turn of 4 done (3 planned for the root, 1 for a
        # subagent never started) → 1 / 4
        done(0, 0, 100, 0, 0, tree_id="u#0", session_id="u", lane=1),
        # v#0 failed: 2 turns sent of 5 planned, the second failed → (2 − 1) / 5
        done(0, 0, 100, 0, 0, tree_id="v#0", session_id="v", lane=2),
        req(turn=1, scheduled_ns=200 * MS, sent_ns=200 * MS, end_ns=1000 * MS,
            status="error", http_status=500, error_type="http", tree_id="v#0",
            session_id="v", lane=2, expected_input_tokens=100),
    ]
    sessions = [
        sess(turns_planned=2, turns_done=2, makespan_ns=300 * MS),
        sess(tree_id="u#0", session_id="u", lane=1, turns_planned=3, turns_done=1,
             status="incomplete"),
        sess(tree_id="u#0", session_id="u/sub", parent_id="u", relation="spawn", lane=1,
             turns_planned=1, turns_done=0, status="incomplete"),
        sess(tree_id="v#0", session_id="v", lane=2, turns_planned=5, turns_done=2,
             status="error"),
    ]
    s = summarize(write_run(tmp_path / "r", reqs, sessions, scenario=hand_scenario("cost")))
    o = s["overall"]
    assert (o["agents"]["completed"], o["agents"]["cut"], o["agents"]["failed"]) == (1, 1, 1)
    c = o["cost"]
    # agents counted = 1 + 1/4 + 1/5 = 1.45 of 3 that ran
    assert c["agents_ran"] == 3
    assert c["agents_counted"] == pytest.approx(1.45)
    fractions = dict(zip(s["trees"]["tree_id"], s["trees"]["agent_fraction"], strict=True))
    assert fractions == pytest.approx({"t#0": 1.0, "u#0": 0.25, "v#0": 0.2})
    # window 0 → 1,000 ms: self-hosted $0.002; per agent 0.002 / 1.45
    assert c["self_hosted_usd"] == pytest.approx(0.002)
    assert c["per_agent_usd"] == pytest.approx(0.002 / 1.45)
    # API: 400 input (no potential) x $3 + 40 output x $15 = 1,800 / 1e6, over 1.45 agents
    assert c["api_per_agent_usd"] == pytest.approx(0.0018 / 1.45)


def test_agent_without_sessions_row(tmp_path: Path) -> None:
    # no sessions.parquet rows: a failed tree counts its successful requests over its
    # requests (1 of 2)
    reqs = [done(0, 0, 100, 0, 0),
            req(turn=1, scheduled_ns=200 * MS, sent_ns=200 * MS, end_ns=1000 * MS,
                status="error", http_status=500, error_type="http")]
    run = write_run(tmp_path / "r", reqs, scenario=hand_scenario("cost"))
    c = summarize(run)["overall"]["cost"]
    assert (c["agents_ran"], c["agents_counted"]) == (1, pytest.approx(0.5))


def test_per_mtok_over_all_tokens_with_split(tmp_path: Path) -> None:
    reqs = [
        # 1,000 input, 400 of them cached by the server; 100 output
        done(0, 0, 1000, 400, 0, output=100),
        # 500 input with no usage cache figure (the trace's count); 400 output
        done(1, 1000, 500, None, 0, output=400),
    ]
    reqs[1]["prompt_tokens"] = None
    run = write_run(tmp_path / "r", reqs, scenario=hand_scenario("cost"))
    c = summarize(run)["overall"]["cost"]
    # tokens: 1,500 input + 500 output = 2,000; self-hosted $0.002/s x 1.1 s = $0.0022
    assert c["tokens"] == {"total": 2000, "input_cached": 400, "input_uncached": 600,
                           "input_cache_unknown": 500, "output": 500}
    assert c["token_shares"] == pytest.approx({"input_cached": 0.2, "input_uncached": 0.3,
                                               "input_cache_unknown": 0.25, "output": 0.25})
    # $/Mtok = 0.0022 x 1e6 / 2,000 = $1.1; no per-output figure (it charged every GPU
    # second to output tokens)
    assert c["per_mtok_total_usd"] == pytest.approx(1.1)
    assert "per_mtok_output_usd" not in c and "per_mtok_input_usd" not in c


def test_cost_block_without_prices() -> None:
    c = cost_block(gpu_hour_usd=None, gpus=None, window_s=1.0, agent_fractions=np.ones(2),
                   input_cached=0, input_uncached=10, input_cache_unknown=0,
                   output_tokens=10, api_cached_input=0, prices=None)
    assert c["self_hosted_usd"] is None and c["per_agent_usd"] is None
    assert c["api"] is None and c["api_equivalent_usd"] is None
    assert c["api_over_self_hosted"] is None and c["agents_counted"] == 2


def test_terminal_cost_lines(tmp_path: Path) -> None:
    text = format_summary(summarize(agent_run(tmp_path / "r", (0, 0))))
    cost = next(line for line in text.splitlines() if line.startswith("cost "))
    api = next(line for line in text.splitlines() if line.startswith("API cost "))
    assert "self-hosted $0.0022 ($3.60/GPU-h x 2 GPUs x 1.1 s window)" in cost
    assert "1.00 agents counted of 1 that ran" in cost and "$0.547/Mtok" in cost
    assert "input cached 0.0%, uncached 99.5%; output 0.5%" in cost
    # the ratio with its inputs, in the published form
    assert ("$0.0096 = 3,000 uncached x $3.00 + 1,000 cached x $0.30 + 20 output x $15.00 "
            "per Mtok (provider cache: potential, hit 25.0%)") in api
    assert "API/self-hosted 4.36x ($0.0096 / $0.0022)" in api
