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

import functools
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

# re-exported: they lived here before ``histogram`` (the engine imports them from there)
from agentbench.sim.histogram import E2E_BUCKETS as E2E_BUCKETS
from agentbench.sim.histogram import TTFT_BUCKETS as TTFT_BUCKETS
from agentbench.sim.histogram import Histogram as Histogram

if TYPE_CHECKING:
    from agentbench.sim.engine import Instance


@functools.lru_cache(maxsize=4096)
def _lab(model: str, index: int, key: str = "", value: str = "") -> dict[str, str]:
    """An instance's labels (and one more, ``key``: ``value``), made once: samples are
    taken every few simulated seconds, and their labels never change (read, not
    modified, by everything that gets them)."""
    out = {"model_name": model, "instance": str(index)}
    if key:
        out[key] = value
    return out


#: one series: its labels and what reads its value now (a number)
Series = tuple[dict[str, str], Callable[[], Any]]
#: a metric family: (name, type, help, its series, whether its values are shown as floats)
Family = tuple[str, str, str, list[Series], bool]


def _families(model: str, instances: Sequence[Instance]) -> list[Family]:
    """Every gauge and counter family of ``instances``, each series with a reader of its
    value (called when sampled: which series exist is fixed by the instances, their tiers
    and roles; only the values move). The readers are bound to the objects they read
    (an instance's stats, queue and caches, made once with it), most of them builtins:
    a virtual-time run reads every series every few simulated seconds (a quarter of the
    samples' CPU in the quickstart was Python readers around ``getattr``). ``float``
    families' values are shown as floats in the exposition text; the others as they are."""
    fams: list[Family] = []
    part = functools.partial

    def fam(name: str, kind: str, help_: str, per: Callable[[Instance], Callable[[], Any]],
            as_float: bool) -> None:
        fams.append((name, kind, help_, [(_lab(model, i.index), per(i)) for i in instances],
                     as_float))

    fam("vllm:num_requests_running", "gauge", "Requests in model execution batches.",
        lambda i: part(_running, i), False)
    fam("vllm:num_requests_waiting", "gauge", "Requests waiting to be processed.",
        lambda i: part(len, i.waiting), False)
    fam("vllm:kv_cache_usage_perc", "gauge",
        "KV-cache usage. 1 means 100 percent usage (blocks held by running requests).",
        lambda i: i.kv_usage, False)
    for name, help_, attr in (
            ("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
             "prompt_tokens"),
            ("vllm:generation_tokens_total", "Number of generation tokens processed.",
             "generation_tokens"),
            ("vllm:prefix_cache_queries_total",
             "Prefix cache queries, in terms of number of queried tokens.", "prefix_queries"),
            ("vllm:prefix_cache_hits_total",
             "Prefix cache hits, in terms of number of cached tokens (all tiers).",
             "prefix_hits")):
        fam(name, "counter", help_, part(_stat_reader, attr=attr), True)
    rows: list[Series] = []
    for i in instances:
        for tier, attr in (("gpu", "hits_gpu"), ("cpu", "hits_cpu"),
                           *((("nvme", "hits_nvme"),) if "nvme" in _tiers(i) else ()),
                           ("shared", "hits_shared")):
            rows.append((_lab(model, i.index, "tier", tier), _stat_reader(i, attr)))
    fams.append(("agentbench_sim_prefix_cache_hits_by_tier_total", "counter",
                 "Cached prompt tokens by where they were found (gpu, cpu, nvme, shared).",
                 rows, False))
    fams += _tier_families(model, instances)
    rows = []
    for i in instances:
        for reason in ("length", "stop"):
            rows.append((_lab(model, i.index, "finished_reason", reason),
                         part(operator.getitem, i.stats.finished, reason)))
    fams.append(("vllm:request_success_total", "counter",
                 "Count of successfully processed requests.", rows, False))
    fam("agentbench_sim_cache_evictions_total", "counter", "GPU KV blocks evicted (LRU).",
        lambda i: part(getattr, i.gpu, "evictions"), False)
    decode = [i for i in instances if i.role == "decode"]
    for name, help_, attr in (
            ("agentbench_sim_kv_transfer_tokens_total",
             "P/D: tokens whose KV moved to this decode instance.", "kv_in_tokens"),
            ("agentbench_sim_kv_transfer_bytes_total",
             "P/D: KV bytes moved to this decode instance.", "kv_in_bytes"),
            ("agentbench_sim_kv_transfer_wait_seconds_total",
             "P/D: seconds requests waited for their KV to reach this decode instance.",
             "kv_in_wait_s")) if decode else ():
        fams.append((name, "counter", help_, [
            (_lab(model, i.index, "role", "decode"), _stat_reader(i, attr))
            for i in decode], True))
    return fams


def _running(inst: Instance) -> float:
    return len(inst.running)


def _stat_reader(inst: Instance, attr: str) -> Callable[[], Any]:
    return functools.partial(getattr, inst.stats, attr)


def _tiers(inst: Instance) -> tuple[str, ...]:
    """The tiers behind an instance's GPU cache (cpu, nvme, shared), in load order."""
    return tuple(t for t, c in (("cpu", inst.cpu), ("nvme", inst.nvme), ("shared", inst.shared))
                 if c is not None)


def _tier_families(model: str, instances: Sequence[Instance]) -> list[Family]:
    """Per tier an instance has: seconds spent loading from it, tokens written to it
    (none for an instance with no tier behind its GPU cache)."""
    out: list[Family] = []
    for name, help_, attr in (
            ("agentbench_sim_tier_load_seconds_total",
             "Seconds spent loading cached KV from each tier into the GPU.", "load_s"),
            ("agentbench_sim_tier_stored_tokens_total",
             "Tokens written through to each tier (new blocks only).", "stored")):
        rows: list[Series] = [(_lab(model, i.index, "tier", t),
                               functools.partial(operator.getitem, getattr(i.stats, attr), t))
                              for i in instances for t in _tiers(i)]
        if rows:
            out.append((name, "counter", help_, rows, True))
    return out


def samples(model: str, instances: Sequence[Instance]) -> list[tuple[str, dict[str, str],
                                                                    float]]:
    """The gauge and counter samples of ``render`` as (name, labels, value), without text:
    what the in-process transport records in virtual time (histograms left out)."""
    return [(name, labels, float(read())) for name, _, _, rows, _ in _families(model, instances)
            for labels, read in rows]


class SampleRows:
    """``samples`` of fixed instances, the series laid out once (names, labels as (key,
    value) pairs) and their values read at each sample: a virtual-time run samples every
    few simulated seconds, and building the families each time was a third of a small
    what-if's CPU (the in-process transport makes the server-metrics rows of a sample
    from them: ``agentbench.results.samples``). A series' ``labels`` list is shared by its
    rows (read, never modified, by the writer)."""

    def __init__(self, model: str, instances: Sequence[Instance]) -> None:
        self._series = [(name, list(labels.items()), read)
                        for name, _, _, rows, _ in _families(model, instances)
                        for labels, read in rows]
        self._reads = [read for _, _, read in self._series]

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self._series]

    @property
    def labels(self) -> list[list[tuple[str, str]]]:
        return [labels for _, labels, _ in self._series]

    def values(self) -> list[float]:
        """Every series' value now, in the order of ``names``."""
        return list(map(float, map(operator.call, self._reads)))


def _labels(model: str, inst: Instance) -> str:
    return f'model_name="{model}",instance="{inst.index}"'


def render(model: str, instances: Sequence[Instance]) -> str:
    """Prometheus exposition text of every instance."""
    out: list[str] = []
    for name, kind, help_, rows, as_float in _families(model, instances):
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for labels, read in rows:
            lab = ",".join(f'{k}="{x}"' for k, x in labels.items())
            value = float(read()) if as_float else read()
            out.append(f"{name}{{{lab}}} {value!r}")
    labs = [_labels(model, i) for i in instances]
    out.append("# HELP vllm:time_to_first_token_seconds Histogram of time to first token in "
               "seconds.")
    out.append("# TYPE vllm:time_to_first_token_seconds histogram")
    for lb, i in zip(labs, instances, strict=True):
        out += i.stats.ttft.lines("vllm:time_to_first_token_seconds", lb)
    out.append("# HELP vllm:e2e_request_latency_seconds Histogram of end to end request "
               "latency in seconds.")
    out.append("# TYPE vllm:e2e_request_latency_seconds histogram")
    for lb, i in zip(labs, instances, strict=True):
        out += i.stats.e2e.lines("vllm:e2e_request_latency_seconds", lb)
    return "\n".join(out) + "\n"
