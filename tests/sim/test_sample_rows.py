"""``SampleRows``: the server-metrics rows of a virtual-time sample, laid out once per run,
are what building every family afresh gives (``samples``), as the instances change: on an
aggregated cluster with CPU, NVMe and shared tiers, and on a P/D cluster."""

from __future__ import annotations

from typing import Any

from agentbench.results.samples import SampleBlock, SeriesLayout
from agentbench.sim.cluster import Cluster
from agentbench.sim.metrics import SampleRows, render, samples
from tests.sim import test_disagg, test_nvme_tier


def _rows(plan: SampleRows, t: int) -> list[dict[str, Any]]:
    """A sample's server-metrics rows, as the in-process transport makes them."""
    return SampleBlock(SeriesLayout(plan.names, plan.labels), t, "ep", plan.values()).rows()


def _fresh(cl: Cluster, t: int) -> list[dict[str, Any]]:
    return [{"time_ns": t, "endpoint": "ep", "name": n, "labels": list(lab.items()),
             "value": v} for n, lab, v in samples("m", cl.instances)]


def test_rows_follow_the_instances_as_they_change() -> None:
    cl = test_nvme_tier._cluster(instances=2, cpu_offload_blocks=50,
                                 nvme_tier={"capacity_blocks": 1000},
                                 shared_tier={"capacity_blocks": 1000})
    plan = SampleRows("m", cl.instances)
    assert _rows(plan, 0) == _fresh(cl, 0)
    assert {r["name"] for r in _rows(plan, 0)} >= {
        "agentbench_sim_tier_load_seconds_total", "agentbench_sim_prefix_cache_hits_by_tier_total"}
    seen = []
    t = 0.0
    for blocks in (list(range(1, 100)), list(range(1, 150)), list(range(200, 300)),
                   list(range(1, 100))):
        _, t = test_nvme_tier._send(cl, blocks, t)
        now = _rows(plan, int(t * 1e9))
        assert now == _fresh(cl, int(t * 1e9))
        seen.append([r["value"] for r in now])
    assert len({tuple(v) for v in seen}) == len(seen)  # the values moved each time
    # and they are the instances' own figures
    rows = _rows(plan, 0)
    for r in rows:
        lab = dict(r["labels"])
        inst = cl.instances[int(lab["instance"])]
        if r["name"] == "agentbench_sim_prefix_cache_hits_by_tier_total":
            assert r["value"] == getattr(inst.stats, f"hits_{lab['tier']}")
        elif r["name"] == "vllm:request_success_total":
            assert r["value"] == inst.stats.finished[lab["finished_reason"]]
        elif r["name"] == "vllm:prompt_tokens_total":
            assert r["value"] == inst.stats.prompt_tokens
    assert sum(r["value"] for r in rows
               if r["name"] == "agentbench_sim_prefix_cache_hits_by_tier_total") > 0


def test_rows_of_a_pd_cluster() -> None:
    cl = test_disagg._cluster(link={"bandwidth_gbps": 200, "latency_s": 0.0005})
    plan = SampleRows("m", cl.instances)
    before = _rows(plan, 1)
    test_disagg._turns(cl, [100, 200])
    after = _rows(plan, 2)
    assert after == _fresh(cl, 2) and before != after
    moved = [r for r in after if r["name"] == "agentbench_sim_kv_transfer_tokens_total"]
    assert moved and moved[0]["labels"] == [("model_name", "m"), ("instance", "1"),
                                            ("role", "decode")] and moved[0]["value"] > 0


def test_render_keeps_integer_gauges_as_integers() -> None:
    cl = test_nvme_tier._cluster()
    text = render("m", cl.instances)
    assert 'vllm:num_requests_running{model_name="m",instance="0"} 0\n' in text
    assert 'vllm:kv_cache_usage_perc{model_name="m",instance="0"} 0.0\n' in text


def test_values_names_and_labels_are_the_families_built_afresh() -> None:
    cl = test_disagg._cluster(link={"bandwidth_gbps": 200, "latency_s": 0.0005})
    plan = SampleRows("m", cl.instances)
    test_disagg._turns(cl, [100, 200])
    fresh = _fresh(cl, 7)  # the families built afresh
    assert plan.values() == [r["value"] for r in fresh]
    assert plan.names == [r["name"] for r in fresh]
    assert plan.labels == [r["labels"] for r in fresh]
    assert any(v > 0 for v in plan.values())
