"""Hit rate from engine counters whose conventions differ, and achieved/potential when the
server's tokenizer counts prompts differently from the trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentbench.metrics import cache


def _samples(rows: list[tuple[int, str, float]]) -> pd.DataFrame:
    return pd.DataFrame({
        "time_ns": [t for t, _, _ in rows], "endpoint": ["e"] * len(rows),
        "name": [n for _, n, _ in rows], "labels": [""] * len(rows),
        "value": [v for _, _, v in rows],
    })


def test_llama_cpp_prompt_counter_excludes_cached_tokens() -> None:
    # llama.cpp: +900 cached, +100 processed over the window -> hit rate 900 / (900 + 100)
    sm = _samples([(0, "llamacpp:prompt_tokens_cached_total", 0.0),
                   (0, "llamacpp:prompt_tokens_total", 50.0),
                   (10, "llamacpp:prompt_tokens_cached_total", 900.0),
                   (10, "llamacpp:prompt_tokens_total", 150.0)])
    got = cache.prometheus_hit_rate(cache.counter_series(sm), [(0, 10)])
    assert got["value"] == pytest.approx(0.9)
    assert (got["hits"], got["queries"]) == (900.0, 1000.0)


def test_vllm_queries_counter_includes_hits() -> None:
    # vLLM: +300 hits of +400 queried tokens -> 0.75
    sm = _samples([(0, "vllm:prefix_cache_hits_total", 100.0),
                   (0, "vllm:prefix_cache_queries_total", 100.0),
                   (10, "vllm:prefix_cache_hits_total", 400.0),
                   (10, "vllm:prefix_cache_queries_total", 500.0)])
    got = cache.prometheus_hit_rate(cache.counter_series(sm), [(0, 10)])
    assert got["value"] == pytest.approx(0.75)


def test_achieved_over_potential_compares_rates_not_token_sums() -> None:
    # The server counts 2 tokens per trace token. Achieved 1,600 / 2,000 = 80%; potential
    # from the trace 900 / 1,000 = 90%; achieved/potential = 0.8 / 0.9 = 0.888...
    cached = np.array([0.0, 1600.0])
    prompt = np.array([400.0, 1600.0])      # Σ 2,000 server tokens
    potential = np.array([0.0, 900.0])
    expected = np.array([200.0, 800.0])     # Σ 1,000 trace tokens
    assert cache.achieved_over_potential(cached, prompt, potential, expected) == (
        pytest.approx(0.8 / 0.9))
    # same counting: equals Σ cached / Σ potential = 720 / 900 = 0.8
    assert cache.achieved_over_potential(np.array([0.0, 720.0]), expected, potential,
                                         expected) == pytest.approx(0.8)
    # no usage at all: unknown, not zero
    nan = np.array([np.nan, np.nan])
    assert cache.achieved_over_potential(nan, nan, potential, expected) is None


def test_the_terminal_summary_says_why_requests_failed() -> None:
    from agentbench.metrics.format import _error_lines

    r = {"errors": [{"error_type": "connect_error", "http_status": None, "count": 2},
                    {"error_type": "http_500", "http_status": 500, "count": 5}]}
    assert _error_lines(r) == [
        "errors        http_500 (HTTP 500) x5, connect_error x2 "
        "(requests.parquet: error_message)"]
    assert _error_lines({"errors": []}) == []
