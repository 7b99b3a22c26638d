"""Prefix-cache hit rate three ways (docs/metrics.md): from ``usage``, from the server's
Prometheus counters, and the trace's potential (infinite-cache ceiling)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from agentbench.metrics.stats import ratio

# (hit counter, query counter) pairs, in order of preference; names without "_total"
# (prometheus_client's parser drops it from family names, scrapes keep it on samples).
# (hits counter, second counter, whether the second counts the hits too). llama.cpp's
# prompt_tokens_total counts only the prompt tokens it processed (cached ones excluded):
# measured against usage in tests/integration (Σ(prompt - cached) = Δ prompt_tokens_total).
COUNTER_PAIRS = (
    ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries", True),
    ("vllm:prompt_tokens_cached", "vllm:prompt_tokens", True),
    ("llamacpp:prompt_tokens_cached", "llamacpp:prompt_tokens", False),
    ("sglang:cached_tokens", "sglang:prompt_tokens", True),
)


def usage_hit_rate(cached: npt.NDArray[np.float64], prompt: npt.NDArray[np.float64]
                   ) -> dict[str, Any]:
    """Hit rate = Σ cached_tokens / Σ prompt_tokens over the requests whose ``usage``
    reported both (dimensionless); the count of requests without them is kept."""
    has = ~np.isnan(cached) & ~np.isnan(prompt)
    c = float(cached[has].sum())
    p = float(prompt[has].sum())
    return {"value": ratio(c, p), "requests": int(has.sum()),
            "requests_without_usage": int((~has).sum()),
            "cached_tokens": c, "prompt_tokens": p}


def potential_hit_rate(potential: npt.NDArray[np.float64],
                       expected_input: npt.NDArray[np.float64]) -> dict[str, Any]:
    """Potential hit rate = Σ potential_cached_tokens / Σ expected_input_tokens (from the
    trace, infinite cache; dimensionless)."""
    return {"value": ratio(float(potential.sum()), float(expected_input.sum())),
            "potential_tokens": float(potential.sum()),
            "input_tokens": float(expected_input.sum())}


def achieved_over_potential(cached: npt.NDArray[np.float64], prompt: npt.NDArray[np.float64],
                            potential: npt.NDArray[np.float64],
                            expected_input: npt.NDArray[np.float64]) -> float | None:
    """Achieved / potential = (Σ cached_tokens / Σ prompt_tokens) / (Σ potential_cached_tokens
    / Σ expected_input_tokens), over the requests whose usage reported both: the share of
    the reusable prefix the engine reused. Rates, not token sums, are compared, so a server
    whose tokenizer counts the prompt differently from the trace is still judged fairly;
    when the counts agree it equals Σ cached / Σ potential."""
    has = ~np.isnan(cached) & ~np.isnan(prompt)
    achieved = ratio(float(cached[has].sum()), float(prompt[has].sum()))
    possible = ratio(float(potential[has].sum()), float(expected_input[has].sum()))
    if achieved is None or possible is None:
        return None
    return ratio(achieved, possible)


def _norm(name: str) -> str:
    return name[:-6] if name.endswith("_total") else name


def counter_series(server_metrics: pd.DataFrame) -> pd.DataFrame:
    """The cache counter samples, with a normalised ``counter`` name and a ``series`` key
    (endpoint + name + labels); other metrics are dropped."""
    names = pd.Series(server_metrics["name"].unique(), dtype=object)
    wanted = {n for hits, queries, _ in COUNTER_PAIRS for n in (hits, queries)}
    keep = {n: _norm(n) for n in names if _norm(n) in wanted}
    sm = server_metrics[server_metrics["name"].isin(list(keep)).to_numpy()].copy()
    sm["counter"] = sm["name"].map(keep).astype(object)
    sm["series"] = (sm["endpoint"].astype(str) + "|" + sm["name"].astype(str) + "|"
                    + sm["labels"].astype(str))
    return sm.sort_values(["series", "time_ns"], kind="stable")


def counter_increase(samples: pd.DataFrame, windows: list[tuple[int, int]]) -> float | None:
    """Increase of one counter (summed over its series) across the windows, Prometheus
    ``increase`` style: a drop is a reset and counts from zero. Each window is widened to
    the last scrape at or before its start and the first scrape at or after its end, so the
    resolution is the scrape interval. None when no series covers a window."""
    total = 0.0
    found = False
    for _, s in samples.groupby("series", sort=False):
        t = s["time_ns"].to_numpy()
        v = s["value"].to_numpy(dtype=np.float64)
        inc = np.diff(v)
        inc = np.where(inc < 0, v[1:], inc)  # counter reset
        for a, b in windows:
            i = int(np.searchsorted(t, a, side="right")) - 1
            j = int(np.searchsorted(t, b, side="left"))
            i = max(i, 0)
            j = min(j, len(t) - 1)
            if j <= i:
                continue
            found = True
            total += float(inc[i:j].sum())
    return total if found else None


def prometheus_hit_rate(series: pd.DataFrame, windows: list[tuple[int, int]],
                        endpoint: str | None = None) -> dict[str, Any]:
    """Hit rate = Δ hits / Δ queries of the first counter pair the server exposes, over
    the measured windows (warmup before them is excluded to scrape resolution); for a
    server whose prompt counter leaves cached tokens out, queries = Δ hits + Δ processed."""
    s = series if endpoint is None else series[(series["endpoint"] == endpoint).to_numpy()]
    for hits, queries, includes_hits in COUNTER_PAIRS:
        h = counter_increase(s[s["counter"] == hits], windows)
        q = counter_increase(s[s["counter"] == queries], windows)
        if h is not None and q is not None:
            if not includes_hits:
                q += h
            return {"value": ratio(h, q), "hits": h, "queries": q,
                    "counters": [hits + "_total", queries + "_total"]}
    return {"value": None, "hits": None, "queries": None, "counters": None}
