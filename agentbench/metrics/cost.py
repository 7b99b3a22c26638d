"""Cost (docs/metrics.md): self-hosted GPU cost over the measured window, per agent and per
million tokens, and what an API would charge for the same tokens with its own prompt cache.

The API figure never uses the self-hosted server's cache hits: those depend on routing
and cache size, and a provider's cache is its own. By default the API is credited the
trace's potential hit (every prefix block sent before is billed at the cached price), so
the same workload costs the same at the API however the self-hosted run was routed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from agentbench.metrics.stats import ratio
from agentbench.results import schema as R

MTOK = 1e6
FloatArray = npt.NDArray[np.float64]
PRICE_KEYS = ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok")


def gpu_cost_usd(gpu_hour_usd: float, gpus: float, window_s: float) -> float:
    """Self-hosted cost = $/GPU-hour × gpus × window hours, $."""
    return gpu_hour_usd * gpus * window_s / 3600.0


def api_cost_usd(prices: Mapping[str, Any], uncached_input: float, cached_input: float,
                 output: float) -> float:
    """API-equivalent cost = (uncached input × input price + cached input × cached price +
    output × output price) / 1e6, $ (prices in $/Mtok)."""
    return (uncached_input * prices["input_per_mtok"]
            + cached_input * prices["cached_input_per_mtok"]
            + output * prices["output_per_mtok"]) / MTOK


def api_cache_model(prices: Mapping[str, Any]) -> tuple[str, float | None]:
    """The provider cache model of ``prices.api_cache``: ("potential", None) (the default,
    also for runs recorded before the option), ("none", 0.0), or ("hit_rate", h)."""
    model = prices.get("api_cache", "potential")
    if isinstance(model, Mapping):
        return "hit_rate", float(model["hit_rate"])
    if model == "none":
        return "none", 0.0
    return "potential", None


def api_cached_input_tokens(prices: Mapping[str, Any] | None, input_tokens: FloatArray,
                            potential: FloatArray, expected_input: FloatArray) -> float:
    """Input tokens the API bills at its cached price, over the given (successful)
    requests. ``potential``: Σ input_i × min(1, potential_cached_i / expected_input_i) (the
    trace's potential hit of each request, applied to its input count; Σ potential_cached
    when the server counts tokens as the trace does); ``none``: 0; ``hit_rate`` h:
    h × Σ input. Never the self-hosted server's ``cached_tokens``."""
    if prices is None:
        return 0.0
    model, hit = api_cache_model(prices)
    total = float(input_tokens.sum())
    if model != "potential":
        return (hit or 0.0) * total
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(expected_input > 0,
                         np.minimum(potential / np.where(expected_input > 0, expected_input, 1),
                                    1.0), 0.0)
    return float((input_tokens * share).sum())


def agent_fractions(trees: pd.DataFrame, sessions: pd.DataFrame) -> FloatArray:
    """How much of each tree (one agent) ran, for ``$/agent``: 1 for a completed tree; for
    a cut or failed one, its successful LLM calls over the calls its trace planned:
    (Σ turns_done − failed requests) / Σ turns_planned over its measured sessions
    (subagents never started included), in [0, 1]. Calls, not tokens: results/ holds no
    token counts for turns that were never sent. A tree with no sessions row counts its
    successful requests over its requests (the turns it never sent are unknown)."""
    n = len(trees)
    req = trees["requests"].to_numpy(dtype=np.float64) if n else np.zeros(0)
    failed = trees["failed"].to_numpy(dtype=np.float64) if n else np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(req > 0, (req - failed) / np.where(req > 0, req, 1), 0.0)
    if n and not sessions.empty:
        s = sessions[(sessions["phase"] == R.MEASURE).to_numpy(dtype=bool)]
        plan = s.groupby([s["stage"].astype(str), s["tree_id"].astype(str)], sort=False)[
            ["turns_done", "turns_planned"]].sum()
        got = plan.reindex(pd.MultiIndex.from_arrays(
            [trees["stage"].astype(str).to_numpy(), trees["tree_id"].astype(str).to_numpy()]))
        done = got["turns_done"].to_numpy(dtype=np.float64, na_value=np.nan)
        planned = got["turns_planned"].to_numpy(dtype=np.float64, na_value=np.nan)
        has = np.isfinite(planned) & (planned > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(has, (done - failed) / np.where(has, planned, 1), frac)
    frac = np.clip(frac, 0.0, 1.0)
    completed = trees["outcome"].to_numpy(dtype=object) == "completed" if n else \
        np.zeros(0, dtype=bool)
    return np.where(completed, 1.0, frac).astype(np.float64)


def cost_block(*, gpu_hour_usd: float | None, gpus: float | None, window_s: float,
               agent_fractions: FloatArray, input_cached: float, input_uncached: float,
               input_cache_unknown: float, output_tokens: float, api_cached_input: float,
               prices: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every cost figure of one block; None where a price is not configured.

    ``input_cached``/``input_uncached`` are the self-hosted split from ``usage``
    (``input_cache_unknown``: input whose usage said nothing); they describe the tokens
    served, and never enter the API figure, which bills ``api_cached_input`` (see
    ``api_cached_input_tokens``) at the cached price and the rest of the input at the
    input price."""
    inp = input_cached + input_uncached + input_cache_unknown
    total = inp + output_tokens
    counted = float(agent_fractions.sum())
    out: dict[str, Any] = {"gpu_hour_usd": gpu_hour_usd, "gpus": gpus}
    self_hosted = None
    if gpu_hour_usd is not None and gpus is not None:
        self_hosted = gpu_cost_usd(gpu_hour_usd, gpus, window_s)
    out["self_hosted_usd"] = self_hosted
    out["agents_ran"] = int(agent_fractions.size)
    out["agents_counted"] = counted
    out["per_agent_usd"] = ratio(self_hosted, counted) if self_hosted is not None else None
    out["per_mtok_total_usd"] = ratio(self_hosted * MTOK, total) \
        if self_hosted is not None else None
    split = {"input_cached": input_cached, "input_uncached": input_uncached,
             "input_cache_unknown": input_cache_unknown, "output": output_tokens}
    out["tokens"] = {"total": total, **split}
    out["token_shares"] = {k: ratio(v, total) for k, v in split.items()}
    api_usd = None
    api: dict[str, Any] | None = None
    if prices is not None:
        model, hit = api_cache_model(prices)
        cached = min(max(api_cached_input, 0.0), inp)
        tokens = {"input_cached": cached, "input_uncached": inp - cached,
                  "output": output_tokens}
        usd = {"input_cached": cached * prices["cached_input_per_mtok"] / MTOK,
               "input_uncached": (inp - cached) * prices["input_per_mtok"] / MTOK,
               "output": output_tokens * prices["output_per_mtok"] / MTOK}
        api_usd = api_cost_usd(prices, inp - cached, cached, output_tokens)
        api = {"cache_model": model, "cache_hit_rate": ratio(cached, inp),
               "prices": {k: float(prices[k]) for k in PRICE_KEYS},
               "tokens": tokens, "usd": usd}
    out["api"] = api
    out["api_equivalent_usd"] = api_usd
    out["api_per_agent_usd"] = ratio(api_usd, counted) if api_usd is not None else None
    out["api_per_mtok_usd"] = ratio(api_usd * MTOK, total) if api_usd is not None else None
    # over no token the two costs compare nothing (a run that served none showed "0x")
    out["api_over_self_hosted"] = ratio(api_usd, self_hosted) \
        if api_usd is not None and self_hosted is not None and total else None
    return out
