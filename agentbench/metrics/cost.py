"""Cost (CONTRACTS §5): self-hosted GPU cost over the measured window, per agent and per
million tokens, and the API-equivalent cost of the same tokens from a price table."""

from __future__ import annotations

from typing import Any

from agentbench.metrics.stats import ratio

MTOK = 1e6


def gpu_cost_usd(gpu_hour_usd: float, gpus: float, window_s: float) -> float:
    """Self-hosted cost = $/GPU-hour × gpus × window hours, $."""
    return gpu_hour_usd * gpus * window_s / 3600.0


def api_cost_usd(prices: dict[str, float], uncached_input: float, cached_input: float,
                 output: float) -> float:
    """API-equivalent cost = (uncached input × input price + cached input × cached price +
    output × output price) / 1e6, $ (prices in $/Mtok)."""
    return (uncached_input * prices["input_per_mtok"]
            + cached_input * prices["cached_input_per_mtok"]
            + output * prices["output_per_mtok"]) / MTOK


def cost_block(*, gpu_hour_usd: float | None, gpus: float | None, window_s: float,
               completed_agents: int, input_tokens: float, cached_input_tokens: float,
               output_tokens: float, prices: dict[str, float] | None) -> dict[str, Any]:
    """Every cost figure of one block; None where a price is not configured. Cached input
    tokens are those ``usage`` reported; input with no cache figure is priced as uncached."""
    out: dict[str, Any] = {"gpu_hour_usd": gpu_hour_usd, "gpus": gpus}
    self_hosted = None
    if gpu_hour_usd is not None and gpus is not None:
        self_hosted = gpu_cost_usd(gpu_hour_usd, gpus, window_s)
    out["self_hosted_usd"] = self_hosted
    total = input_tokens + output_tokens
    if self_hosted is not None:
        out["per_agent_usd"] = ratio(self_hosted, completed_agents)
        out["per_mtok_total_usd"] = ratio(self_hosted * MTOK, total)
        out["per_mtok_input_usd"] = ratio(self_hosted * MTOK, input_tokens)
        out["per_mtok_output_usd"] = ratio(self_hosted * MTOK, output_tokens)
    else:
        out.update(dict.fromkeys(("per_agent_usd", "per_mtok_total_usd", "per_mtok_input_usd",
                                  "per_mtok_output_usd")))
    api = None
    if prices is not None:
        api = api_cost_usd(prices, input_tokens - cached_input_tokens, cached_input_tokens,
                           output_tokens)
    out["api_equivalent_usd"] = api
    out["api_per_agent_usd"] = ratio(api, completed_agents) if api is not None else None
    out["api_over_self_hosted"] = ratio(api, self_hosted) \
        if api is not None and self_hosted is not None else None
    return out
