"""llama.cpp-style slots (``agentbench/sim/slots.py``, a preset's ``scheduler: slots``): slot
choice by prompt similarity and LRU, cached tokens from a slot's previous tokens, waiting
for a free slot, the RAM prompt cache, the batch order, the context limits, and runs that
are deterministic and equal to stepping one step at a time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim import decoderuns
from agentbench.sim.cluster import Cluster, SimRejected
from agentbench.sim.engine import Instance, SimRequest
from agentbench.sim.presetfile import parse_preset
from agentbench.sim.presets import get_preset
from agentbench.sim.slots import (
    EMPTY,
    Held,
    RamCache,
    SlotInstance,
    common_blocks,
    ram_default,
)
from agentbench.sim.virtual import run_virtual
from tests.sim.test_fitted_preset import TEXT
from tests.sim.test_preset_files import _virtual_run
from tests.sim.test_sim_virtual_runs import _build, _results, step_by_step, watches_engine

SLOTS = TEXT.replace("scheduler: paged", "scheduler: slots")
PRESET = parse_preset(SLOTS)
BS = 4


def _req(rid: int, blocks: list[str], extra: int = 2, out: int = 3) -> SimRequest:
    """A prompt of the named blocks of ``BS`` tokens (prefix-chained hashes) and ``extra``
    tokens more."""
    hashes, h = [], 0
    for b in blocks:
        h = hash((h, b))
        hashes.append(h)
    n = len(blocks) * BS + extra
    return SimRequest(rid=rid, prompt_tokens=n, hashes=hashes, output_tokens=out,
                      match_limit=min(len(hashes), (n - 1) // BS))


def _inst(seqs: int = 4, kv: int = 4000, ram: int | None = None, unified: bool = False,
          budget: int = 2048) -> SlotInstance:
    p = replace(PRESET, max_num_seqs=seqs, max_num_batched_tokens=budget)
    return SlotInstance(0, p, BS, kv // BS, ram_tokens=ram, unified=unified)


def _drain(inst: Instance, t: float = 0.0) -> float:
    """Step ``inst`` until it is idle; return the time."""
    while inst.has_work():
        dur = inst.plan(t)
        assert dur is not None
        t += dur
        inst.commit(t)
    return t


def _serve(inst: Instance, *reqs: SimRequest, t: float = 0.0) -> float:
    for r in reqs:
        r.arrival = t
        inst.add(r)
    return _drain(inst, t)


def _slot_of(inst: SlotInstance, r: SimRequest) -> int:
    return inst._slot_of[r.rid].index


def test_the_cluster_builds_slot_instances_for_a_slots_preset(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(SLOTS)
    cl = Cluster(SimulatedEndpoint(kind="simulated", preset=str(f), instances=2))
    inst = cl.instances[0]
    assert [type(i) for i in cl.instances] == [SlotInstance, SlotInstance]
    assert isinstance(inst, SlotInstance) and inst.ram is not None and inst.ram.limit is None
    assert inst.n_ctx_slot == 24576 // 4 and not inst.unified
    cl = Cluster(SimulatedEndpoint(kind="simulated", preset=str(f), cpu_offload_blocks=10))
    assert cl.instances[0].ram.limit == 160  # type: ignore[attr-defined]
    f.write_text(TEXT)
    assert type(Cluster(SimulatedEndpoint(kind="simulated", preset=str(f))).instances[0]) \
        is Instance


def test_the_ram_cache_holds_8_gib_of_kv_by_default() -> None:
    """As llama.cpp's --cache-ram 8192 over the KV bytes per token (at least the KV size);
    a fitted preset does not say its KV bytes: unbounded; 0: no RAM cache."""
    p = replace(get_preset("h100-llama3-8b"), scheduler="slots", max_num_seqs=4)
    ram = SlotInstance(0, p, 16, 1000, ram_tokens=None).ram
    assert ram is not None and ram.limit == (8 << 30) // p.kv_bytes_per_token == 131072
    ram = SlotInstance(0, p, 16, 10_000, ram_tokens=None).ram
    assert ram is not None and ram.limit == 160_000
    assert ram_default(PRESET, 100) == -1 and _inst(ram=0).ram is None


def test_common_blocks_is_the_shared_prefix() -> None:
    a = _req(1, list("abcdefg")).hashes
    for other, k in (("abcdefg", 7), ("abcdxyz", 4), ("xbcdefg", 0), ("abc", 3),
                     ("abcdefgh", 7), ("", 0)):
        b = _req(2, list(other)).hashes
        assert common_blocks(a, len(a), b, len(b)) == k
    assert common_blocks(a, 2, a, 7) == 2


def test_a_sessions_next_turn_returns_to_its_slot_and_is_cached() -> None:
    """The first request takes the last slot (LRU, never used), the next one of another
    session the one before; a second turn goes back to its own slot by similarity and is
    cached up to its previous prompt (not its generated tokens)."""
    inst = _inst()
    a1, b1 = _req(1, list("sAAAA")), _req(2, list("tBBBB"))
    _serve(inst, a1)
    assert a1.cached_tokens == 0 and inst.slots[3].held.tokens == 22 + 3 - 1
    _serve(inst, b1)
    assert inst.slots[2].held.hashes is b1.hashes
    a2 = _req(3, list("sAAAAaa"))
    a2.arrival = 100.0
    inst.add(a2)
    inst.plan(100.0)
    assert _slot_of(inst, a2) == 3
    assert a2.cached_tokens == a2.gpu_hit_tokens == 5 * BS and a2.cpu_hit_tokens == 0
    _drain(inst, 100.0)
    assert inst.stats.prefix_hits == 5 * BS


def test_a_fifth_request_waits_for_a_free_slot() -> None:
    inst = _inst()
    reqs = [_req(i, [f"p{i}"] * 3, out=2 + 10 * (i == 0)) for i in range(5)]
    for r in reqs:
        inst.add(r)
    assert inst.plan(0.0) is not None
    assert [r.rid for r in inst.prefilling] == [3, 2, 1, 0]  # in slot order
    assert list(inst.waiting) == [reqs[4]] and reqs[4].admitted_at is None
    t = inst.plan(0.0)  # planned again at once: still no slot
    assert t is not None and list(inst.waiting) == [reqs[4]]
    inst.commit(t)  # prompts done, four decoding
    assert decoderuns.queue_stuck(inst)
    while reqs[4].admitted_at is None:
        dur = inst.plan(t)
        assert dur is not None
        t += dur
        inst.commit(t)
    assert reqs[1].finished_at is not None and reqs[0].finished_at is None
    assert reqs[4].admitted_at == reqs[1].finished_at
    _drain(inst, t)
    assert all(r.finish_reason == "length" for r in reqs)


def test_a_slot_taken_by_another_session_loses_its_prefix_without_the_ram_cache() -> None:
    inst = _inst(seqs=1, ram=0)
    a1, b1, a2 = _req(1, list("sAAAA")), _req(2, list("tBBBB")), _req(3, list("sAAAAa"))
    t = _serve(inst, a1)
    t = _serve(inst, b1, t=t)
    assert b1.cached_tokens == 0 and inst.slots[0].held.hashes is b1.hashes
    assert inst.gpu.evictions == 5
    _serve(inst, a2, t=t)
    assert a2.cached_tokens == 0


def test_a_slot_taken_by_another_session_comes_back_from_the_ram_cache() -> None:
    """With the RAM cache the overwritten prompt was saved and is restored (a CPU hit), and
    it leaves the RAM cache as it is restored."""
    inst = _inst(seqs=1)
    a1, b1, a2 = _req(1, list("sAAAA")), _req(2, list("tBBBB")), _req(3, list("sAAAAa"))
    t = _serve(inst, a1)
    t = _serve(inst, b1, t=t)
    ram = inst.ram
    assert ram is not None and [s.hashes for s in ram.states] == [a1.hashes]
    _serve(inst, a2, t=t)
    assert a2.cached_tokens == a2.cpu_hit_tokens == 5 * BS and a2.gpu_hit_tokens == 0
    assert inst.stats.hits_cpu == 5 * BS
    assert [s.hashes for s in ram.states] == [b1.hashes]  # a1's was taken, b1's saved


def test_a_similar_slot_keeping_half_its_tokens_is_not_looked_up_in_ram() -> None:
    """llama.cpp only looks in RAM when the slot chosen by similarity keeps under half of
    its tokens: a subagent sharing the system prompt leaves the slot it took from its
    parent with the system prompt, and the parent's next turn reuses only that."""
    inst = _inst(seqs=1)
    sys, long = list("SSSSS"), list("PPPPPPPPPPPPPPPPPPPP")
    parent, sub = _req(1, sys + long), _req(2, sys + list("q"))
    t = _serve(inst, parent)
    t = _serve(inst, sub, t=t)
    assert sub.cached_tokens == 5 * BS and sub.cpu_hit_tokens == 0
    again = _req(3, sys + long + list("r"))
    _serve(inst, again, t=t)
    assert again.cached_tokens == 5 * BS and again.cpu_hit_tokens == 0  # parent's in RAM
    assert inst.ram is not None and any(s.hashes is parent.hashes for s in inst.ram.states)
    inst2 = _inst(seqs=1)
    t = _serve(inst2, _req(1, sys + long))
    t = _serve(inst2, _req(2, list("x")), t=t)  # nothing shared: LRU, so RAM is searched
    back = _req(3, sys + long + list("r"))
    _serve(inst2, back, t=t)
    assert back.cpu_hit_tokens == 25 * BS


def test_ram_cache_saves_once_drops_what_a_save_holds_and_the_oldest_beyond_its_limit(
        ) -> None:
    a, ab = _req(1, list("aa")).hashes, _req(2, list("aabb")).hashes
    ram = RamCache(30, BS)
    short = Held(a, 2, 8, 0)  # on a block boundary, nothing of its own
    assert ram.save(short) == 8 and ram.save(short) == 0  # held already: skipped
    long = Held(ab, 4, 18, 7)  # 2 tokens of its own
    assert ram.save(long) == 18 and ram.states == [long]  # short is in long: dropped
    assert ram.save(Held(a, 2, 10, 9)) == 10  # a's tail differs from long's: kept apart
    assert ram.tokens == 28
    c = Held(_req(3, list("c")).hashes, 1, 6, 11)
    assert ram.save(c) == 6 and ram.states[0].tail == 9 and ram.tokens == 16  # long gone
    assert ram.save(Held(a, 2, 31, 12)) == 0  # larger than the cache: skipped
    assert ram.save(EMPTY) == 0


def test_ram_cache_restores_only_a_prompt_better_on_both_shares() -> None:
    ram = RamCache(None, BS)
    x = _req(1, list("abcdefgh"))
    tiny = Held(_req(2, list("ab") + list("zzzzzzzzzz")).hashes, 12, 48, 1)  # keeps 8/48
    good = Held(_req(3, list("abcdef")).hashes, 6, 26, 2)
    ram.save(tiny)
    ram.save(good)
    own = Held(_req(4, list("abc")).hashes, 3, 12, 3)  # keeps all of its 12: no better
    assert ram.take(own, x) is None
    assert ram.take(Held(_req(5, list("ab")).hashes, 2, 40, 4), x) is good
    assert ram.states == [tiny] and ram.tokens == 48
    assert ram.take(EMPTY, x) is None  # tiny keeps under a quarter of itself


def test_unified_kv_empties_idle_slots_so_reuse_comes_from_ram() -> None:
    inst = _inst(seqs=2, unified=True)
    assert inst.n_ctx_slot == 4000
    a1, b1 = _req(1, list("sAAAA")), _req(2, list("tBBBB"))
    t = _serve(inst, a1)
    assert inst.slots[1].held.tokens > 0  # released, not cleared until the next launch
    t = _serve(inst, b1, t=t)
    assert inst.slots[1].held is EMPTY and b1.cached_tokens == 0
    a2 = _req(3, list("sAAAAa"))
    _serve(inst, a2, t=t)
    assert a2.cpu_hit_tokens == 5 * BS
    full = _inst(seqs=2, kv=100, unified=True)
    big, other = _req(1, list("abcdefghijkl"), out=40), _req(2, list("xyz"), out=30)
    for r in (big, other):
        full.add(r)
    full.plan(0.0)
    assert list(full.waiting) == [other] and decoderuns.queue_stuck(full)  # 90 + 44 > 100


def test_per_slot_context_cuts_the_output_and_refuses_a_prompt_as_long(
        tmp_path: Path) -> None:
    inst = _inst(seqs=4, kv=4 * 40)
    r = _req(1, list("abcdefg"), extra=2, out=100)  # 30 tokens in a 40-token slot
    _serve(inst, r)
    assert r.generated == r.output_tokens == 10 and r.finish_reason == "length"
    f = tmp_path / "s.yaml"
    f.write_text(SLOTS)
    cl = Cluster(SimulatedEndpoint(kind="simulated", preset=str(f), block_size=16))
    assert cl.instances[0].gpu.capacity == 24576 // 4 // 16
    ok = cl.make_hashed([1] * 383, 6143, max_tokens=10_000)
    cl.submit(ok, at=0.0)
    with pytest.raises(SimRejected):
        cl.submit(cl.make_hashed([1] * 384, 6144, max_tokens=1), at=0.0)


def test_prompts_fill_the_batch_in_slot_order_after_the_decodes() -> None:
    """The decodes go first, then prompt tokens slot by slot (not by arrival) while the
    batch has room."""
    inst = _inst(seqs=3, budget=20)
    first = _req(1, list("aaaa"), out=5)
    t = _serve(inst, first)  # slot 2 holds it now; 1 and 0 are empty
    b, a = _req(2, list("aaaacccc")), _req(3, list("bbbbbb"))  # b goes back to slot 2
    for r in (b, a):
        r.arrival = t
        inst.add(r)
    inst.plan(t)
    assert _slot_of(inst, b) == 2 and b.cached_tokens == 16 and _slot_of(inst, a) == 1
    assert [(_slot_of(inst, r), n) for r, n in inst._prefill_plan] == [(1, 20)]
    inst = _inst(seqs=3, budget=20)
    dec, c = _req(4, list("d"), out=50), _req(5, list("eeeeeeeeee"))
    inst.add(dec)
    dur = inst.plan(0.0)
    assert dur is not None
    inst.commit(dur)
    c.arrival = dur
    inst.add(c)
    inst.plan(dur)
    assert inst._dec_batch == [dec] and inst._prefill_plan == [(c, 19)]


def test_virtual_runs_are_deterministic(tmp_path: Path) -> None:
    f = tmp_path / "slots.yaml"
    f.write_text(SLOTS.replace("value: 24576", "value: 4000000"))
    a, b = (pq.read_table(_virtual_run(tmp_path / "out", rid, str(f)) / "requests.parquet")
            for rid in ("a", "b"))
    assert a.num_rows > 5 and set(a.column("status").to_pylist()) == {"ok"}
    assert sum(a.column("cached_tokens").to_pylist()) > 0
    assert a.drop(["request_id"]).equals(b.drop(["request_id"]))


@watches_engine
@pytest.mark.parametrize("cfg", [
    dict(max_num_seqs=3, cpu_offload_blocks=3000),  # waiting for slots, RAM evictions
    dict(max_num_seqs=8, router="cache_aware"),
    dict(max_num_seqs=2, max_num_batched_tokens=512, cpu_offload_blocks=400),
])
def test_decode_runs_computed_ahead_equal_stepping(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   cfg: dict[str, object]) -> None:
    f = tmp_path / "slots.yaml"
    f.write_text(SLOTS.replace("value: 24576", "value: 4000000"))
    runs: list[int] = []
    real = decoderuns.decode_run

    def counting(inst: Instance, start: float, max_steps: int) -> decoderuns.DecodeRun | None:
        run = real(inst, start, max_steps)
        runs.append(run is not None)
        return run

    monkeypatch.setattr("agentbench.sim.virtual.decode_run", counting)
    work = dict(sessions=10, turns=4, out_tokens=80, first=(2000, 6000), growth=(100, 800),
                think=(0.0, 3.0), preset=str(f), **cfg)
    cl, sched = _build(**work)  # type: ignore[arg-type]
    assert isinstance(cl.instances[0], SlotInstance)
    new = _results(cl, run_virtual(cl, sched))
    cl, sched = _build(**work)  # type: ignore[arg-type]
    old = _results(cl, step_by_step(cl, sched))
    assert new == old and sum(runs) > 5
    assert sum(r.cached_tokens for r in (req for _, req in sched)) > 0
