"""The scenario's hardware and price sections: what the endpoints run on, and an API
price table, for per-GPU throughput and the costs (docs/metrics.md#cost)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from agentbench.scenario.strict import Strict

#: bounds that keep every cost finite: a price of 1e308 made the cost infinite, which no
#: summary.json can hold (the run then read as broken for good), and a GPU count of 1e-320
#: (above zero) did the same by dividing
MAX_PRICE_USD = 1e6
MIN_GPUS = 1e-3
#: the most GPUs a scenario's ``hardware.gpus`` may state
MAX_GPUS = 1e6


class Hardware(Strict):
    """What the endpoint runs on, for per-GPU throughput and cost."""

    gpus: float = Field(1.0, ge=MIN_GPUS, le=MAX_GPUS, description="GPUs serving the "
                        "endpoint(s) in total (a thousandth to a million).")
    gpu_hour_usd: float | None = Field(None, ge=0, le=MAX_PRICE_USD,
                                       description="Price of one GPU-hour, $ (at most a "
                                       "million).")


class ApiCacheHitRate(Strict):
    """An API provider's prompt cache that hits a fixed share of input tokens."""

    hit_rate: float = Field(ge=0, le=1, description="Share of input tokens the API bills at "
                            "the cached price (0-1).")


def _api_cache_tag(v: Any) -> str:
    return "rate" if isinstance(v, dict | ApiCacheHitRate) else "name"


#: a provider cache model: a name, or a mapping (so a bad mapping is reported as one)
ApiCache = Annotated[Annotated[Literal["potential", "none"], Tag("name")]
                     | Annotated[ApiCacheHitRate, Tag("rate")],
                     Discriminator(_api_cache_tag)]


class Prices(Strict):
    """An API price table, $ per million tokens, for API-equivalent cost."""

    input_per_mtok: float = Field(ge=0, le=MAX_PRICE_USD,
                                  description="Uncached input tokens, $/Mtok.")
    cached_input_per_mtok: float = Field(ge=0, le=MAX_PRICE_USD,
                                         description="Cached input tokens, $/Mtok.")
    output_per_mtok: float = Field(ge=0, le=MAX_PRICE_USD, description="Output tokens, $/Mtok.")
    api_cache: ApiCache = Field(
        "potential", description="The API provider's own prompt cache, for API-equivalent "
        "cost (never the self-hosted server's hits): 'potential' (the trace's potential hit: "
        "every prefix block sent before is billed as cached), 'none' (all input billed "
        "uncached), or {hit_rate: h} (a share h of input billed as cached).")
