"""Figures per group of requests: by turn index, by context length, cold against warm
(docs/metrics.md): requests, failures, TTFT quantiles, E2E p50, hit rate and potential of
each group, as summary.json ``by_turn``, ``by_context`` and ``by_warmth``."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.metrics.derive import Derived
from agentbench.metrics.stats import QNAMES, group_quantiles, none_if_nan
from agentbench.results import schema as R

Mask = npt.NDArray[np.bool_]

# context-length bucket edges, tokens (TTFT vs context is the agentic curve)
CONTEXT_EDGES = (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288,
                 1048576)


def _group_table(d: Derived, codes: npt.NDArray[np.int64], n: int, m: Mask
                 ) -> dict[str, Any]:
    """Per-group columns for the by-turn and by-context tables."""
    okm = m & d.ok
    cnt = np.bincount(codes[m], minlength=n)
    # a request the run's own bound cancelled is no failure (the summary's ``requests``)
    cancelled = d.df["status"].to_numpy(dtype=object) == R.CANCELLED
    failed = np.bincount(codes[m & ~d.ok & ~cancelled], minlength=n)
    ttft = np.where(okm, d.ttft_ms, np.nan)
    e2e = np.where(okm, d.e2e_ms, np.nan)
    tc, tmean, tq = group_quantiles(codes, ttft, n)
    _, _, eq = group_quantiles(codes, e2e, n, (0.5,))
    known = m & ~np.isnan(d.cached_tokens) & ~np.isnan(d.prompt_tokens)
    c = np.bincount(codes[known], weights=d.cached_tokens[known], minlength=n)
    p = np.bincount(codes[known], weights=d.prompt_tokens[known], minlength=n)
    pot = np.bincount(codes[m], weights=d.potential[m], minlength=n)
    exp = np.bincount(codes[m], weights=d.expected_input[m], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        cols = {"requests": cnt, "failed": failed, "ttft_ms_mean": tmean,
                **{f"ttft_ms_{q}": tq[:, j] for j, q in enumerate(QNAMES)},
                "e2e_ms_p50": eq[:, 0], "hit_rate": np.where(p > 0, c / p, np.nan),
                "usage_requests": np.bincount(codes[known], minlength=n),
                "potential_hit_rate": np.where(exp > 0, pot / exp, np.nan),
                "input_tokens_mean": exp / np.maximum(cnt, 1)}
    return cols


def by_turn(d: Derived) -> list[dict[str, Any]]:
    """Per turn index: requests, failed, TTFT, E2E p50, hit rate (usage) and potential."""
    m = d.measured
    turns = d.df["turn"].to_numpy(dtype=np.int64)
    if not m.any():
        return []
    n = int(turns[m].max()) + 1
    codes = np.clip(turns, 0, n - 1)
    cols = _group_table(d, codes, n, m)
    return [{"turn": int(i), **{k: none_if_nan(v[i]) for k, v in cols.items()}}
            for i in range(n) if cols["requests"][i] > 0]


def by_context(d: Derived) -> list[dict[str, Any]]:
    """Per context-length bucket (expected input tokens, [lo, hi)): as by_turn."""
    m = d.measured
    edges = np.asarray(CONTEXT_EDGES, dtype=np.float64)
    codes = np.clip(np.searchsorted(edges, d.expected_input, side="right") - 1, 0,
                    len(edges) - 1).astype(np.int64)
    n = len(edges)
    cols = _group_table(d, codes, n, m)
    his = [*CONTEXT_EDGES[1:], None]
    return [{"context_lo": CONTEXT_EDGES[i], "context_hi": his[i],
             **{k: none_if_nan(v[i]) for k, v in cols.items()}}
            for i in range(n) if cols["requests"][i] > 0]


#: the cached share of a prompt under which a request is ``cold``, over which ``warm``
WARMTH_EDGES = (0.1, 0.9)
#: the groups of ``by_warmth``, in order
WARMTH_NAMES = ("cold", "partly cached", "warm", "ended without usage")


def by_warmth(d: Derived) -> list[dict[str, Any]]:
    """Cold (cached share of the prompt under 10%), partly cached and warm (over 90%)
    requests, as by_turn: what a cache hit buys in TTFT, on this run. The share is the
    server's usage (cached ÷ prompt tokens); without usage, the trace's potential
    (potential ÷ expected input: what a perfect cache would have had) for a request that
    finished. One that failed or was cut without usage is ``ended without usage``: how
    much of its prompt was cached is not known, and the trace's potential would count it
    warm for a cache that never served it."""
    m = d.measured
    no_usage = np.isnan(d.cached_tokens) | ~(d.prompt_tokens > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(no_usage, d.potential / np.maximum(d.expected_input, 1),
                         d.cached_tokens / d.prompt_tokens)
    codes = np.where(share < WARMTH_EDGES[0], 0, np.where(share > WARMTH_EDGES[1], 2, 1))
    codes = np.where(no_usage & ~d.ok, 3, codes)
    cols = _group_table(d, codes.astype(np.int64), len(WARMTH_NAMES), m)
    return [{"warmth": name, **{k: none_if_nan(v[i]) for k, v in cols.items()}}
            for i, name in enumerate(WARMTH_NAMES) if cols["requests"][i] > 0]
