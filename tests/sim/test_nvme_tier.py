"""The NVMe tier behind the CPU one: what it holds, what a load from it costs (by hand),
and its counters in /metrics."""

from __future__ import annotations

from typing import Any

import pytest

from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim.cluster import Cluster, nvme_spec
from agentbench.sim.metrics import samples
from agentbench.sim.presets import get_preset
from agentbench.sim.virtual import run_virtual, virtual_end

BS = 16


def _cluster(**kw: Any) -> Cluster:
    return Cluster(SimulatedEndpoint.model_validate(
        {"kind": "simulated", "block_size": BS, "cache_blocks": 400, **kw}))


def _send(cl: Cluster, blocks: list[int], at: float) -> Any:
    req = cl.make_hashed(blocks, len(blocks) * BS + 5, max_tokens=1, ignore_eos=True)
    done = run_virtual(cl, [(at, req)], start=at)
    assert done == [req]
    return req, virtual_end(cl, done)


def test_a_load_from_nvme_costs_its_bytes_over_the_bandwidth_plus_latency() -> None:
    # 70B FP8: 163,840 B per token; 56 Gb/s = 7 GB/s: 23.405714... us per token
    spec = nvme_spec(SimulatedEndpoint(kind="simulated", nvme_tier={"capacity_blocks": 10}),
                     get_preset("h200-llama3-70b"))
    assert spec == (10, pytest.approx(163_840 / 7e9, rel=1e-12), 0.0001)
    # GPU 400 blocks, CPU 100 blocks, NVMe 10,000: prompt A (300 blocks) is pushed out of
    # the GPU (but for its first blocks) and out of the CPU by prompt B (380 blocks), and
    # found again on NVMe
    cl = _cluster(cpu_offload_blocks=100,
                  nvme_tier={"capacity_blocks": 10_000, "bandwidth_gbps": 56,
                             "latency_s": 0.001})
    a = list(range(1, 301))
    b = list(range(1001, 1381))
    _, t = _send(cl, a, 0.0)
    _, t = _send(cl, b, t + 1)
    r, _ = _send(cl, a, t + 1)
    inst = cl.instances[0]
    assert 0 < r.gpu_hit_tokens < 40 * BS and r.cpu_hit_tokens == 0
    nvme = r.nvme_hit_tokens
    assert nvme == 300 * BS - r.gpu_hit_tokens and r.cached_tokens == 300 * BS
    want = nvme * 163_840 / 7e9 + 0.001  # about 0.1 s
    assert r.load_s == pytest.approx(want, rel=1e-12)
    assert inst.stats.load_s["nvme"] == pytest.approx(want, rel=1e-12)
    # written through: every new block of the three prompts (A's second time is known)
    assert inst.stats.stored["nvme"] == (300 + 380) * BS
    got = {(n, lab.get("tier")): v for n, lab, v in samples("m", cl.instances)}
    assert got[("agentbench_sim_prefix_cache_hits_by_tier_total", "nvme")] == nvme
    assert got[("agentbench_sim_tier_load_seconds_total", "nvme")] == pytest.approx(want)
    assert got[("agentbench_sim_tier_stored_tokens_total", "nvme")] == (300 + 380) * BS


def test_the_cpu_tier_serves_first_and_nvme_only_what_it_lacks() -> None:
    cl = _cluster(cpu_offload_blocks=1000, nvme_tier={"capacity_blocks": 10_000})
    a = list(range(1, 301))
    b = list(range(1001, 1381))
    _, t = _send(cl, a, 0.0)
    _, t = _send(cl, b, t + 1)
    r, _ = _send(cl, a, t + 1)
    assert r.cpu_hit_tokens > 200 * BS and r.nvme_hit_tokens == 0
    assert r.gpu_hit_tokens + r.cpu_hit_tokens == r.cached_tokens == 300 * BS


def test_without_an_nvme_tier_nothing_changes_in_metrics() -> None:
    cl = _cluster()
    _send(cl, list(range(1, 11)), 0.0)
    names = {n for n, _, _ in samples("m", cl.instances)}
    assert not any(n.startswith("agentbench_sim_tier_") for n in names)
    tiers = {lab.get("tier") for n, lab, _ in samples("m", cl.instances)
             if n == "agentbench_sim_prefix_cache_hits_by_tier_total"}
    assert tiers == {"gpu", "cpu", "shared"}


def test_a_load_from_the_shared_and_cpu_tiers_pays_their_latency() -> None:
    cl = _cluster(instances=2, router="round_robin", cpu_offload_blocks=1000,
                  cpu_offload_latency_s=0.004,
                  shared_tier={"capacity_blocks": 10_000, "load_s_per_token": 1e-6,
                               "latency_s": 0.01})
    a = list(range(1, 101))
    _, t = _send(cl, a, 0.0)  # instance 0 computes and writes through
    r, t = _send(cl, a, t + 1)  # instance 1: from the shared store
    assert r.instance == 1 and r.shared_hit_tokens == 100 * BS
    assert r.load_s == pytest.approx(100 * BS * 1e-6 + 0.01, rel=1e-12)
    b = list(range(501, 531))
    _send(cl, b + [9999], t + 1)  # instance 0 again
    # push a out of instance 0's GPU (400 blocks) but not out of its CPU tier
    _, t = _send(cl, list(range(2000, 2390)), t + 2)  # instance 1
    _, t = _send(cl, list(range(3000, 3390)), t + 3)  # instance 0
    _, t = _send(cl, list(range(4000, 4010)), t + 4)  # instance 1
    r, _ = _send(cl, a, t + 5)  # instance 0: a from its CPU tier
    assert r.instance == 0 and r.cpu_hit_tokens > 0
    per = get_preset("h200-llama3-70b").cpu_load_s_per_token
    assert r.load_s == pytest.approx(r.cpu_hit_tokens * per + 0.004
                                     + r.shared_hit_tokens * 1e-6
                                     + (0.01 if r.shared_hit_tokens else 0.0), rel=1e-12)
    assert cl.instances[1].stats.load_s["shared"] == pytest.approx(100 * BS * 1e-6 + 0.01)


@pytest.mark.parametrize(("extra", "says"), [
    ({"nvme_tier": {"capacity_blocks": 10, "bandwidth_gbps": 100, "load_s_per_token": 1e-6}},
     "give bandwidth_gbps or load_s_per_token, not both"),
    ({"nvme_tier": {"capacity_blocks": 10, "load_s_per_token": 2.0**70}},
     "less than or equal to 1"),
    ({"cpu_offload_latency_s": 0.25}, "there is no CPU tier"),
    ({"disaggregation": {"prefill": {}, "decode": {},
                         "link": {"kv_bytes_per_token": 2.0**70}}},
     "less than or equal to 1000000000"),
])
def test_a_tier_setting_that_cannot_hold_is_refused(extra: dict[str, Any], says: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=says):
        SimulatedEndpoint.model_validate({"kind": "simulated", **extra})
