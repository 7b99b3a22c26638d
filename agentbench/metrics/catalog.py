"""Named headline metrics: where each lives in a summary block, its unit, and which way is
better. Shared by comparisons, reports and the gate so a name means one figure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    path: tuple[str, ...]        # keys inside a summary block ("overall", a stage...)
    unit: str                    # "ms", "s", "tok/s", "$", "" (a share: shown as %)
    better: str                  # "lower" | "higher"
    share: bool = False          # a fraction in [0, 1]: differences are in points
    #: a change is the serving's to answer for (better or worse); False for a figure of
    #: the workload itself (the trace's potential hit rate, the API-price costs)
    judged: bool = True

    def value(self, block: dict[str, Any]) -> float | None:
        """This metric's value in a summary block, None when absent."""
        cur: Any = block
        for k in self.path:
            if not isinstance(cur, dict) or cur.get(k) is None:
                return None
            cur = cur[k]
        return float(cur)


def _lat(kind: str, label: str) -> list[Metric]:
    return [Metric(f"{kind}_{q}", f"{q.upper()} {label}", ("latency", f"{kind}_ms", q), "ms",
                   "lower") for q in ("p50", "p90", "p95", "p99", "mean")]


METRICS: dict[str, Metric] = {m.name: m for m in [
    *_lat("ttft", "TTFT"), *_lat("tpot", "TPOT"), *_lat("itl", "ITL"), *_lat("e2e", "E2E"),
    Metric("schedule_lag_p99", "P99 schedule lag", ("latency", "schedule_lag_ms", "p99"), "ms",
           "lower"),
    Metric("interactivity_p50", "P50 interactivity", ("interactivity_tok_s", "p50"), "tok/s",
           "higher"),
    Metric("throughput", "throughput", ("throughput", "total_tok_s"), "tok/s", "higher"),
    Metric("throughput_per_gpu", "throughput/GPU", ("throughput", "per_gpu_total_tok_s"),
           "tok/s", "higher"),
    Metric("output_throughput", "output throughput", ("throughput", "output_tok_s"), "tok/s",
           "higher"),
    Metric("requests_per_s", "requests/s", ("throughput", "requests_per_s"), "req/s",
           "higher"),
    Metric("hit_rate", "hit rate", ("hit_rate", "usage", "value"), "", "higher", True),
    Metric("hit_rate_server", "hit rate (server)", ("hit_rate", "prometheus", "value"), "",
           "higher", True),
    Metric("hit_rate_potential", "potential hit rate", ("hit_rate", "potential", "value"), "",
           "higher", True, judged=False),
    Metric("achieved_over_potential", "achieved/potential",
           ("hit_rate", "achieved_over_potential"), "", "higher", True),
    Metric("goodput", "goodput", ("goodput", "requests"), "", "higher", True),
    Metric("agent_goodput", "agent goodput", ("goodput", "agents"), "", "higher", True),
    Metric("error_rate", "error rate", ("requests", "error_rate"), "", "lower", True),
    Metric("makespan_p50", "P50 agent makespan", ("agents", "makespan_s", "p50"), "s",
           "lower"),
    Metric("llm_wait_p50", "P50 agent LLM wait", ("agents", "llm_wait_s", "p50"), "s",
           "lower"),
    # cost (docs/metrics.md): $/agent over every agent that ran (cut or failed ones
    # pro-rated); $/Mtok over all tokens; API figures with the provider's own cache
    Metric("self_hosted_cost", "self-hosted cost", ("cost", "self_hosted_usd"), "$", "lower"),
    Metric("cost_per_agent", "$/agent", ("cost", "per_agent_usd"), "$", "lower"),
    Metric("cost_per_mtok", "$/Mtok (all tokens)", ("cost", "per_mtok_total_usd"), "$",
           "lower"),
    # what the workload would cost at an API's prices, whatever the serving's own hits:
    # the workload's figure, not judged (as the potential hit rate)
    Metric("api_cost", "API-equivalent cost", ("cost", "api_equivalent_usd"), "$", "lower",
           judged=False),
    Metric("api_cost_per_agent", "API $/agent", ("cost", "api_per_agent_usd"), "$", "lower",
           judged=False),
    Metric("api_cost_per_mtok", "API $/Mtok (all tokens)", ("cost", "api_per_mtok_usd"), "$",
           "lower", judged=False),
    Metric("api_over_self_hosted", "API/self-hosted cost", ("cost", "api_over_self_hosted"),
           "x", "higher"),
]}

# the side-by-side comparison, in the order the published results use
HEADLINE = ("throughput", "throughput_per_gpu", "ttft_p50", "ttft_p90", "e2e_p50", "tpot_p50",
            "hit_rate", "hit_rate_server", "goodput", "makespan_p50", "cost_per_mtok",
            "error_rate")


def format_value(m: Metric, v: float | None) -> str:
    """A metric's value for tables: shares as %, times and rates with their unit."""
    if v is None:
        return "-"
    if m.share:
        return f"{100 * v:.1f}%"
    if m.unit == "$":
        return f"${v:,.4f}" if abs(v) < 1 else f"${v:,.2f}"
    if m.unit == "x":
        return f"{v:.2f}x"
    digits = 0 if abs(v) >= 100 else (1 if abs(v) >= 10 else 2)
    return f"{v:,.{digits}f} {m.unit}".strip()


def shows_zero(text: str) -> bool:
    """Whether a formatted value reads as zero ("$0.0000", "0.0 ms"): a ratio against it
    would read as a ratio against zero ("2970000x lower" beside "$0.0000")."""
    return not any(c in "123456789" for c in text)
