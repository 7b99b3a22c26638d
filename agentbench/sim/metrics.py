"""The simulator's ``/metrics``: Prometheus text format with vLLM's metric names, one series
per instance (labels ``model_name`` and ``instance``).

Counters agree exactly with the ``usage`` the simulator returns:
``vllm:prompt_tokens_total`` = sum of ``prompt_tokens``, ``vllm:generation_tokens_total`` =
sum of ``completion_tokens``, ``vllm:prefix_cache_hits_total`` = sum of
``prompt_tokens_details.cached_tokens`` (GPU prefix hits *and* tokens loaded from the CPU or
shared tier, so the hit rate from counters equals the hit rate from usage; the split by
tier is in ``agentbench_sim_prefix_cache_hits_by_tier_total``). Prompt and cache counters
count a request when it is admitted, so a request the client abandons afterwards is counted
without a ``usage`` to match (as in vLLM). Latency histograms are in
client-visible seconds (simulated seconds divided by ``speedup``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentbench.sim.engine import Instance

#: vLLM's bucket bounds for vllm:time_to_first_token_seconds.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
#: vLLM's bucket bounds for vllm:e2e_request_latency_seconds.
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    """Cumulative Prometheus histogram (bucket counts, sum, count)."""

    __slots__ = ("bounds", "counts", "total", "n")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, v)] += 1
        self.total += v
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        acc = 0
        for b, c in zip(self.bounds, self.counts, strict=False):
            acc += c
            out.append(f'{name}_bucket{{{labels},le="{b}"}} {acc}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


def _labels(model: str, inst: Instance) -> str:
    return f'model_name="{model}",instance="{inst.index}"'


def render(model: str, instances: Sequence[Instance]) -> str:
    """Prometheus exposition text of every instance."""
    out: list[str] = []

    def family(name: str, kind: str, help_: str) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")

    lab = [_labels(model, i) for i in instances]
    family("vllm:num_requests_running", "gauge", "Requests in model execution batches.")
    out += [f"vllm:num_requests_running{{{lb}}} {len(i.running)}"
            for lb, i in zip(lab, instances, strict=True)]
    family("vllm:num_requests_waiting", "gauge", "Requests waiting to be processed.")
    out += [f"vllm:num_requests_waiting{{{lb}}} {len(i.waiting)}"
            for lb, i in zip(lab, instances, strict=True)]
    family("vllm:kv_cache_usage_perc", "gauge",
           "KV-cache usage. 1 means 100 percent usage (blocks held by running requests).")
    out += [f"vllm:kv_cache_usage_perc{{{lb}}} {i.kv_usage()!r}"
            for lb, i in zip(lab, instances, strict=True)]
    counters = (
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "prompt_tokens"),
        ("vllm:generation_tokens_total", "Number of generation tokens processed.",
         "generation_tokens"),
        ("vllm:prefix_cache_queries_total",
         "Prefix cache queries, in terms of number of queried tokens.", "prefix_queries"),
        ("vllm:prefix_cache_hits_total",
         "Prefix cache hits, in terms of number of cached tokens (all tiers).", "prefix_hits"),
    )
    for name, help_, attr in counters:
        family(name, "counter", help_)
        out += [f"{name}{{{lb}}} {getattr(i.stats, attr)}"
                for lb, i in zip(lab, instances, strict=True)]
    name = "agentbench_sim_prefix_cache_hits_by_tier_total"
    family(name, "counter", "Cached prompt tokens by where they were found (gpu, cpu, shared).")
    for lb, i in zip(lab, instances, strict=True):
        for tier, v in (("gpu", i.stats.hits_gpu), ("cpu", i.stats.hits_cpu),
                        ("shared", i.stats.hits_shared)):
            out.append(f'{name}{{{lb},tier="{tier}"}} {v}')
    family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
    for lb, i in zip(lab, instances, strict=True):
        for reason in ("length", "stop"):
            out.append(f'vllm:request_success_total{{{lb},finished_reason="{reason}"}} '
                       f"{i.stats.finished[reason]}")
    name = "agentbench_sim_cache_evictions_total"
    family(name, "counter", "GPU KV blocks evicted (LRU).")
    out += [f"{name}{{{lb}}} {i.gpu.evictions}" for lb, i in zip(lab, instances, strict=True)]
    family("vllm:time_to_first_token_seconds", "histogram",
           "Histogram of time to first token in seconds.")
    for lb, i in zip(lab, instances, strict=True):
        out += i.stats.ttft.lines("vllm:time_to_first_token_seconds", lb)
    family("vllm:e2e_request_latency_seconds", "histogram",
           "Histogram of end to end request latency in seconds.")
    for lb, i in zip(lab, instances, strict=True):
        out += i.stats.e2e.lines("vllm:e2e_request_latency_seconds", lb)
    return "\n".join(out) + "\n"
