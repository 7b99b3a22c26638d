"""Prefill/decode disaggregation in the simulator (``sim/disagg.py``): transfer sizes and
times against hand-computed figures, and requests through a P/D cluster on the virtual
clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from agentbench.replay.clock import run_on
from agentbench.scenario.endpoints import KvLink, SimulatedEndpoint
from agentbench.sim.cluster import Cluster
from agentbench.sim.disagg import kv_bytes_per_token, transfer
from agentbench.sim.engine import SimRequest
from agentbench.sim.metrics import samples
from agentbench.sim.presets import get_preset, modeled_gpus
from agentbench.sim.virtual import TimerDriver, run_virtual

BS = 16


def test_kv_bytes_per_token_follow_the_model_shape() -> None:
    # Llama-3-70B: 80 layers x 8 KV heads x head dim 128 x 2 (K and V) x 1 byte (FP8),
    # not the hidden size (8,192 x 80 x 2 would be 1.3 MB)
    p = get_preset("h200-llama3-70b")
    assert kv_bytes_per_token(KvLink(), p) == 80 * 8 * 128 * 2 * 1 == 163_840
    # Llama-3.1-8B in FP8: 32 layers x 8 KV heads x 128 x 2 x 1 byte
    assert kv_bytes_per_token(KvLink(), get_preset("h100-llama3-8b")) == 32 * 8 * 128 * 2
    # a latent (MLA) size given on the link wins: DeepSeek-V3, 61 layers x (512 + 64) x 1
    assert kv_bytes_per_token(KvLink(kv_bytes_per_token=61 * 576), p) == 35_136


def test_transfer_times_by_hand() -> None:
    kvb = 163_840.0
    link = KvLink(bandwidth_gbps=200, latency_s=0.0005, overlap=False)
    t = transfer(10_000, kvb, link, prefill_s=0.05)
    # 10,000 x 163,840 B = 1.6384 GB over 25 GB/s = 65.536 ms, plus 0.5 ms
    assert t.tokens == 10_000 and t.bytes == 1_638_400_000
    assert t.wire_s == pytest.approx(0.065536, rel=1e-12)
    assert t.exposed_s == pytest.approx(0.066036, rel=1e-12)
    # streamed layer by layer during a 50 ms prefill: 15.536 ms outlast it
    t = transfer(10_000, kvb, KvLink(bandwidth_gbps=200, latency_s=0.0005), prefill_s=0.05)
    assert t.exposed_s == pytest.approx(0.0005 + 0.015536, rel=1e-12)
    # a prefill longer than the wire time hides it all; the latency stays
    assert transfer(10_000, kvb, KvLink(latency_s=0.001), prefill_s=1.0).exposed_s == 0.001
    # NVLink (3,600 Gb/s = 450 GB/s) moves the same 1.6384 GB in 3.641 ms
    t = transfer(10_000, kvb, KvLink(bandwidth_gbps=3600, latency_s=0, overlap=False), 0.0)
    assert t.exposed_s == pytest.approx(1.6384e9 / 450e9, rel=1e-12)
    assert transfer(0, kvb, link, 0.0).exposed_s == 0.0005  # nothing to move: latency only


def test_the_pools_set_the_instance_count_and_refuse_a_contradiction() -> None:
    pools = {"prefill": {"instances": 2}, "decode": {"instances": 6}}
    assert SimulatedEndpoint(kind="simulated", disaggregation=pools).instances == 8
    assert SimulatedEndpoint(kind="simulated", instances=8, disaggregation=pools).instances == 8
    with pytest.raises(ValidationError, match="pools hold 8"):
        SimulatedEndpoint(kind="simulated", instances=4, disaggregation=pools)
    # GPUs modeled: each pool's instances x its preset's GPUs (the 70B preset: one each)
    ep = SimulatedEndpoint(kind="simulated", disaggregation=pools)
    assert modeled_gpus(ep) == 8
    pools["decode"]["preset"] = "instant"  # a synthetic preset: 0 GPUs
    assert modeled_gpus(SimulatedEndpoint(kind="simulated", disaggregation=pools)) == 2


def _cluster(shared_tier: dict[str, Any] | None = None, **pd: Any) -> Cluster:
    d = {"prefill": {"instances": 1}, "decode": {"instances": 1}, **pd}
    return Cluster(SimulatedEndpoint(kind="simulated", block_size=BS, disaggregation=d,
                                     shared_tier=shared_tier))


def _turns(cl: Cluster, prompts: list[int], out: int = 8) -> list[SimRequest]:
    """One session's turns, each sent when the previous one finished; prompt k holds the
    first ``prompts[k]`` blocks of one chain plus 5 tokens."""

    async def main() -> list[SimRequest]:
        loop = asyncio.get_running_loop()
        cl.clock = loop.time
        drv = TimerDriver(cl, loop)
        drv.start()
        done = []
        for blocks in prompts:
            req = cl.make_hashed(list(range(1, blocks + 1)), blocks * BS + 5, max_tokens=out,
                                 ignore_eos=True, session="s")
            fut: asyncio.Future[None] = loop.create_future()
            req.on_progress = lambda r, f=fut: (  # type: ignore[misc]
                r.finished_at is not None and not f.done() and f.set_result(None))
            cl.submit(req)
            await fut
            done.append(req)
        drv.close()
        return done

    return run_on("virtual", main())


def test_a_request_prefills_moves_and_decodes_on_its_pools() -> None:
    cl = _cluster(link={"bandwidth_gbps": 200, "latency_s": 0.0005, "overlap": False})
    pd = cl.pd
    assert pd is not None and len(cl.instances) == 2
    prefill, decode = cl.instances
    r1, r2 = _turns(cl, [100, 200])
    # prefill instance: prompts counted there, no token generated; decode: every token
    assert prefill.stats.prompt_tokens == r1.prompt_tokens + r2.prompt_tokens
    assert prefill.stats.generation_tokens == 0 and prefill.stats.requests_admitted == 2
    assert decode.stats.generation_tokens == 16 and decode.stats.prompt_tokens == 0
    assert r1.instance == r2.instance == 1 and r1.generated == r2.generated == 8
    # turn 2's first 100 blocks hit the prefill instance's cache
    assert r1.cached_tokens == 0 and r2.cached_tokens == r2.gpu_hit_tokens == 100 * BS
    # what moved: all of turn 1; of turn 2 only what the decode instance lacked (it kept
    # turn 1's 100 blocks)
    assert pd.stats.transfers == 2
    assert pd.stats.tokens == (100 * BS + 5) + (200 * BS + 5 - 100 * BS)
    assert pd.stats.bytes == pd.stats.tokens * 163_840
    assert pd.stats.exposed_s == pytest.approx(2 * 0.0005 + pd.stats.bytes / 25e9, rel=1e-12)
    # the first token comes from the decode instance after the transfer
    for r in (r1, r2):
        assert r.first_token_at is not None and r.finished_at is not None
        assert r.first_token_at > r.arrival  # arrival: when its KV reached the decode side
    assert decode.gpu.match(r2.hashes, r2.match_limit) == 200
    # /metrics: what moved, on the decode instance
    got = {(n, lab["instance"]): v for n, lab, v in samples("m", cl.instances)
           if n.startswith("agentbench_sim_kv_transfer")}
    assert got == {("agentbench_sim_kv_transfer_tokens_total", "1"): pd.stats.tokens,
                   ("agentbench_sim_kv_transfer_bytes_total", "1"): pd.stats.bytes,
                   ("agentbench_sim_kv_transfer_wait_seconds_total", "1"): pd.stats.exposed_s}


def test_without_kept_kv_every_turn_moves_its_whole_prompt() -> None:
    cl = _cluster(decode_keeps_kv=False)
    r1, r2 = _turns(cl, [100, 200])
    assert cl.pd is not None
    assert cl.pd.stats.tokens == r1.prompt_tokens + r2.prompt_tokens
    assert r2.cached_tokens == 100 * BS  # the prefill side's cache is unaffected


def test_the_transfer_adds_to_ttft_and_a_faster_link_lowers_it() -> None:
    slow = _turns(_cluster(link={"bandwidth_gbps": 10, "overlap": False}), [500])[0]
    fast = _turns(_cluster(link={"bandwidth_gbps": 3600, "overlap": False}), [500])[0]
    assert slow.first_token_at is not None and fast.first_token_at is not None
    wire = (500 * BS + 5) * 163_840
    # both sent at 0 with the same prefill: the first tokens differ by the wire times
    assert slow.first_token_at - fast.first_token_at == pytest.approx(
        wire / 1.25e9 - wire / 450e9, rel=1e-9)


def test_an_aggregated_run_is_refused_by_run_virtual_only_for_pd() -> None:
    cl = _cluster()
    with pytest.raises(ValueError, match="aggregated"):
        run_virtual(cl, [])


def test_a_request_aborted_on_the_link_never_reaches_a_decode_instance() -> None:
    cl = _cluster(link={"bandwidth_gbps": 0.001, "overlap": False})  # a very slow link

    async def main() -> tuple[SimRequest, int]:
        loop = asyncio.get_running_loop()
        cl.clock = loop.time
        drv = TimerDriver(cl, loop)
        drv.start()
        req = cl.make_hashed(list(range(1, 11)), 10 * BS + 5, max_tokens=4, ignore_eos=True)
        cl.submit(req)
        while not cl.in_transit:
            await asyncio.sleep(0.01)
        cl.abort(req)
        await asyncio.sleep(10_000)  # past the transfer's end
        drv.close()
        return req, cl.instances[1].load

    req, decode_load = run_on("virtual", main())
    assert req.aborted and decode_load == 0 and not cl.in_transit
    assert cl.instances[1].stats.requests_admitted == 0
    # a transfer cut short is not counted as KV moved
    assert cl.pd is not None and cl.pd.stats.transfers == 0
    assert cl.instances[1].stats.kv_in_bytes == cl.instances[1].stats.kv_in_wait_s == 0


def test_a_tier_load_is_paid_on_the_prefill_side_only() -> None:
    """Turn 2 goes to the other prefill instance and loads turn 1's 5,000 blocks from the
    shared tier there (0.53 s at the preset's 6.6 us per token); its decode instance only
    receives the KV and must not pay that load again."""
    cl = _cluster(shared_tier={"capacity_blocks": 100_000},
                  prefill={"instances": 2, "router": "round_robin"})
    r1, r2 = _turns(cl, [5000, 5001], out=2)
    assert r1.instance == r2.instance == 2
    assert r2.shared_hit_tokens == 5000 * BS
    p1, decode = cl.instances[1], cl.instances[2]
    load_s = r2.shared_hit_tokens * p1.shared_load
    assert load_s > 0.5
    assert p1.stats.busy_s > load_s  # the prefill instance paid it
    assert decode.stats.busy_s < 0.25  # four decode-side steps of the 70B, no load


@pytest.mark.parametrize(("pool", "says"), [
    ({"preset": "nosuch"}, "field 'disaggregation.prefill.preset': unknown simulator preset "
                           "'nosuch'"),
    ({"preset": "scenarios/presets/llama-cpp-tiny.yaml"}, "is a slots one; disaggregation "
                                                          "needs paged"),
    ({"preset": "scenarios/presets/vllm-cpu-tiny.yaml"}, "gives no KV bytes per token: set "
                                                         "disaggregation.link.kv_bytes_per_"
                                                         "token"),
])
def test_a_pool_preset_it_cannot_use_is_one_line_before_the_run(pool: dict[str, Any],
                                                                 says: str) -> None:
    from agentbench.errors import InputError
    from agentbench.scenario.loading import validate_data
    from agentbench.sim.presetcheck import check_presets
    from tests.helpers import ROOT

    if "/" in pool["preset"]:
        pool = {"preset": str(ROOT / pool["preset"])}
    sc = validate_data({
        "name": "pd", "endpoints": [{"kind": "simulated", "disaggregation": {
            "prefill": {"instances": 1, **pool}, "decode": {"instances": 1}}}],
        "trace": {"kind": "synth", "profile": "codex", "sessions": 2},
        "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 2}},
        "pd.yaml")
    with pytest.raises(InputError) as got:
        check_presets(sc, "pd.yaml")
    line = got.value.one_line()
    assert says in line and "\n" not in line and line.startswith("pd.yaml")


def test_the_wall_clock_driver_moves_requests_too() -> None:
    """``serve-sim`` and ``clock: wall`` step instances with ``Cluster._drive``: a P/D
    request there prefills, moves and decodes as on the virtual clock."""
    cfg = SimulatedEndpoint(kind="simulated", block_size=BS, speedup=1000.0,
                            disaggregation={"prefill": {"instances": 1},
                                            "decode": {"instances": 2}})

    async def main() -> tuple[SimRequest, Cluster]:
        cl = Cluster(cfg)
        await cl.start()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        req = cl.make_hashed(list(range(1, 201)), 200 * BS + 5, max_tokens=6, ignore_eos=True)
        req.on_progress = lambda r: (r.finished_at is not None and not fut.done()
                                     and fut.set_result(None))
        cl.submit(req)
        await asyncio.wait_for(fut, 30)
        await cl.close()
        return req, cl

    req, cl = asyncio.run(main())
    assert req.generated == 6 and req.instance in (1, 2) and not cl.in_transit
    assert cl.pd is not None and cl.pd.stats.tokens == 200 * BS + 5
    assert cl.instances[0].stats.generation_tokens == 0
    assert cl.instances[req.instance].stats.generation_tokens == 6


def test_pools_of_two_models_or_a_base_preset_they_cannot_use_are_one_line() -> None:
    from agentbench.errors import InputError
    from agentbench.scenario.loading import validate_data
    from agentbench.sim.presetcheck import check_presets
    from tests.helpers import ROOT

    def check(endpoint: dict[str, Any]) -> str:
        sc = validate_data({
            "name": "pd", "endpoints": [{"kind": "simulated", **endpoint}],
            "trace": {"kind": "synth", "profile": "codex", "sessions": 2},
            "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 2}},
            "pd.yaml")
        with pytest.raises(InputError) as got:
            check_presets(sc, "pd.yaml")
        return got.value.one_line()

    other = str(ROOT / "agentbench" / "sim" / "preset_files" / "h200-gpt-oss-120b-all-full.yaml")
    line = check({"disaggregation": {"prefill": {"preset": other}, "decode": {}}})
    assert "field 'disaggregation'" in line and "must agree" in line
    # the pools use the endpoint's own preset: the error names the key that set it
    tiny = str(ROOT / "scenarios" / "presets" / "vllm-cpu-tiny.yaml")
    line = check({"preset": tiny, "disaggregation": {"prefill": {}, "decode": {}}})
    assert "field 'preset'" in line and "no KV bytes per token" in line
    line = check({"preset": tiny, "nvme_tier": {"capacity_blocks": 10}})
    assert "field 'preset'" in line and "nvme_tier.load_s_per_token" in line


def test_a_request_too_large_for_the_decode_pool_says_which_pool() -> None:
    from agentbench.sim.cluster import SimRejected

    cl = Cluster(SimulatedEndpoint(kind="simulated", block_size=BS, cache_blocks=None,
                                   disaggregation={"prefill": {"instances": 1},
                                                   "decode": {"instances": 1,
                                                              "preset": "h200-llama3-70b"}}))
    cl.instances[1].gpu.capacity = 100  # a decode instance far smaller than the prefill one
    req = cl.make_hashed(list(range(1, 201)), 200 * BS + 5, max_tokens=8, ignore_eos=True)
    with pytest.raises(SimRejected, match="but a decode instance holds 100 blocks"):
        cl.submit(req)
    cl.instances[0].gpu.capacity = 150
    with pytest.raises(SimRejected, match=r"\(3,205 prompt \+ 0 output tokens\) but a "
                                          "prefill instance holds 150"):
        cl.submit(req)
