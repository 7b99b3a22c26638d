"""The simulator's paged prefix cache and scheduler: exact hit counts on hand-made block
sequences, eviction order, pinning, tier loads, and cached <= potential (property)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbench.scenario.model import SharedTier, SimulatedEndpoint
from agentbench.sim.cluster import Cluster
from agentbench.sim.engine import SimRequest
from agentbench.sim.kvcache import PrefixCache
from agentbench.sim.virtual import run_virtual, virtual_end
from agentbench.traces.model import Session, Turn, iter_turns_in_send_order
from agentbench.traces.stats import potential_cached_tokens
from agentbench.traces.words import CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_REPLY_PRIMER, block_text

# Hand-made chains: a block's "hash" names its whole prefix, so chain A = [1, 2, 3, 4] and
# chain B = [1, 2, 7] share blocks 1, 2; [9, 2] shares nothing (2 after 9 is another prefix,
# so a real hash would differ; here we use distinct ints for distinct prefixes).
A = [1, 2, 3, 4]
B = [1, 2, 7]


def test_match_counts_leading_blocks_exactly() -> None:
    c = PrefixCache(10)
    assert c.insert(A, 4, now=1.0) == 4
    assert c.match(A) == 4
    assert c.match(B) == 2  # 1, 2 cached; 7 not
    assert c.match([5, 6]) == 0
    assert c.match(A, limit=3) == 3  # the lookup limit (one token always computed)
    assert c.insert(B, 3, now=2.0) == 1  # only block 7 is new
    assert len(c) == 5
    assert c.match(B) == 3


def test_eviction_is_lru_over_leaves_tail_first() -> None:
    c = PrefixCache(5)
    c.insert(A, 4, now=1.0)  # 1-2-3-4 used at t=1
    c.insert(B, 3, now=2.0)  # 1-2-7 used at t=2 (touches 1, 2 through 7)
    # LRU: 4 (t=1, deepest first), then 3 (t=1); then 7 (t=2), then 2, then 1.
    assert c.lru_order() == [4, 3, 7, 2, 1]
    c.touch(A, 4, now=3.0)  # A used again: its path 1-2-3-4 is now the newest
    assert c.lru_order() == [7, 4, 3, 2, 1]
    assert c.evict(1) == 1
    assert 7 not in c and c.match(B) == 2 and c.match(A) == 4
    assert c.evictions == 1


def test_pinned_blocks_and_their_prefix_survive_eviction() -> None:
    c = PrefixCache(5)
    c.insert(A, 4, now=1.0)
    c.insert(B, 3, now=2.0)
    c.pin(A, 4)  # a running request uses A: 1-2-3-4 all protected
    assert c.evict(5) == 1  # only 7 can go
    assert c.match(A) == 4 and 7 not in c
    assert not c.make_free(2)  # 1 block free, nothing evictable
    c.unpin(4)
    assert c.make_free(5) and len(c) == 0


def test_insert_into_full_tier_keeps_the_prefix_it_extends() -> None:
    t = PrefixCache(4, "shared")
    t.insert([10, 11, 12], 3, now=1.0)
    # Extending 10-11-12 by 13, 14 needs 2 blocks, 1 free: evicting must not take 12 (the
    # parent being extended), so the tier keeps 10-11-12-13 and leaves 14 out.
    added = t.insert([10, 11, 12, 13, 14], 5, now=2.0, make_room=True)
    assert added == 1 and t.match([10, 11, 12, 13, 14]) == 4


def _cfg(**kw: object) -> SimulatedEndpoint:
    base: dict[str, object] = {"kind": "simulated", "preset": "h200-llama3-70b"}
    base.update(kw)
    return SimulatedEndpoint.model_validate(base)


def _prompt(cluster: Cluster, n_blocks: int, salt: int = 1, tail: int = 5) -> np.ndarray:
    text = "".join(block_text(salt, h, 64) for h in range(n_blocks)) + block_text(99, salt,
                                                                                 tail)
    return cluster.hasher.chat_tokens([("user", text)])


def _run_one(cluster: Cluster, req: SimRequest, at: float) -> float:
    done = run_virtual(cluster, [(at, req)], start=at)
    assert done == [req]
    return virtual_end(cluster, done)


def test_engine_hits_exact_and_ttft_drops_with_hits() -> None:
    cl = Cluster(_cfg(block_size=16))
    tokens = _prompt(cl, 100)  # 1 role + 6400 + 5 tail + end + primer = 6408 tokens
    assert tokens.size == 6408
    r1 = cl.make_request(tokens, max_tokens=4, ignore_eos=True)
    t = _run_one(cl, r1, 0.0)
    r2 = cl.make_request(tokens, max_tokens=4, ignore_eos=True)
    _run_one(cl, r2, t + 1.0)
    assert r1.cached_tokens == 0
    # Same prompt: every full block but the one holding the last token: (6408 - 1) // 16.
    assert r2.cached_tokens == (6408 - 1) // 16 * 16 == 6400
    assert r1.generated == r2.generated == 4
    ttft1 = r1.first_token_at - r1.arrival  # type: ignore[operator]
    ttft2 = r2.first_token_at - r2.arrival  # type: ignore[operator]
    assert ttft1 > 5 * ttft2


def test_shared_tier_loads_instead_of_recomputing() -> None:
    shared = _cfg(instances=2, router="round_robin",
                  shared_tier=SharedTier(capacity_blocks=100_000, load_s_per_token=1e-6))
    cl = Cluster(shared)
    tokens = _prompt(cl, 200)
    r1 = cl.make_request(tokens, max_tokens=1, ignore_eos=True)
    t = _run_one(cl, r1, 0.0)  # instance 0 computes and writes through
    r2 = cl.make_request(tokens, max_tokens=1, ignore_eos=True)
    _run_one(cl, r2, t + 1.0)  # instance 1: GPU miss, shared-tier hit
    assert (r1.instance, r2.instance) == (0, 1)
    assert r2.gpu_hit_tokens == 0 and r2.shared_hit_tokens == r2.cached_tokens == 12800
    assert cl.instances[1].stats.hits_shared == 12800
    ttft_cold = r1.first_token_at - r1.arrival  # type: ignore[operator]
    ttft_tier = r2.first_token_at - r2.arrival  # type: ignore[operator]
    # Loading costs 12,800 x 1 us = 12.8 ms on top of a one-token-ish step.
    assert ttft_tier >= 0.0128
    assert ttft_cold > 5 * ttft_tier
    # The same pair without the tier: the second request recomputes.
    cl2 = Cluster(_cfg(instances=2, router="round_robin"))
    a = cl2.make_request(tokens, max_tokens=1, ignore_eos=True)
    t = _run_one(cl2, a, 0.0)
    b = cl2.make_request(tokens, max_tokens=1, ignore_eos=True)
    _run_one(cl2, b, t + 1.0)
    assert b.cached_tokens == 0


def test_cpu_offload_tier_serves_what_gpu_evicted() -> None:
    cl = Cluster(_cfg(block_size=16, cache_blocks=500, cpu_offload_blocks=2000))
    p1, p2 = _prompt(cl, 100, salt=1), _prompt(cl, 100, salt=2)  # 401 blocks each
    t = 0.0
    for toks in (p1, p2):  # p2 needs 401 blocks: p1's evicted from the 500-block GPU cache
        t = _run_one(cl, cl.make_request(toks, max_tokens=1, ignore_eos=True), t) + 1.0
    r = cl.make_request(p1, max_tokens=1, ignore_eos=True)
    _run_one(cl, r, t)
    inst = cl.instances[0]
    assert inst.gpu.evictions > 0
    assert r.cached_tokens == 6400 and r.cpu_hit_tokens > 0
    assert r.gpu_hit_tokens + r.cpu_hit_tokens == 6400


def test_request_waits_for_blocks_instead_of_overcommitting() -> None:
    cl = Cluster(_cfg(block_size=16, cache_blocks=450))
    p1, p2 = _prompt(cl, 100, salt=1), _prompt(cl, 100, salt=2)
    r1 = cl.make_request(p1, max_tokens=50, ignore_eos=True)
    r2 = cl.make_request(p2, max_tokens=50, ignore_eos=True)
    done = run_virtual(cl, [(0.0, r1), (0.0, r2)])
    assert [r.rid for r in done] == [r1.rid, r2.rid]
    assert r2.admitted_at is not None and r1.finished_at is not None
    assert r2.admitted_at >= r1.finished_at  # 2 x 405 blocks do not fit in 450 at once
    assert cl.instances[0].gpu.reserved == 0


# ------------------------------------------------------------------ property


@st.composite
def _sessions(draw: st.DrawFn) -> list[Session]:
    n_sessions = draw(st.integers(1, 3))
    sessions = []
    base: list[int] = []
    for s in range(n_sessions):
        ids: list[int] = list(base[: draw(st.integers(0, len(base)))])  # fork-like sharing
        turns = []
        for k in range(draw(st.integers(1, 5))):
            keep = draw(st.integers(0, len(ids)))
            ids = ids[:keep] + draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
            tail = draw(st.integers(4, 64))  # a prompt is at least its template
            n_tok = 64 * (len(ids) - 1) + tail
            turns.append(Turn(turn=k, t=float(k), think_s=0.0, api_s=None,
                              input_tokens=n_tok, output_tokens=1,
                              hash_ids=np.array(ids, dtype=np.int64), block_size=64))
        base = ids
        sessions.append(Session(session_id=f"s{s}", parent_id=None, relation="root",
                                parent_turn=None, join_turn=None, model=None, source="t",
                                scope="one", start_s=draw(st.floats(0, 3)), turns=turns))
    return sessions


CHAT_OVERHEAD = CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_REPLY_PRIMER


def _chat_content(turn: Turn) -> str:
    """One user message whose chat prompt is exactly ``input_tokens`` long: the blocks'
    text, trimmed at the end by the template's tokens (as a prompt builder must do)."""
    budget = max(0, turn.input_tokens - CHAT_OVERHEAD)
    parts = []
    for h in turn.hash_ids.tolist():
        n = min(64, budget)
        if n <= 0:
            break
        parts.append(block_text(7, h, n))
        budget -= n
    return "".join(parts)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions=_sessions(), bs=st.sampled_from([2, 4, 8, 16, 32, 64]),
       router=st.sampled_from(["round_robin", "session_affinity", "cache_aware", "random"]),
       cache_tokens=st.integers(500, 6000), tier=st.booleans(), cpu=st.integers(0, 100))
def test_cached_tokens_never_exceed_potential(sessions: list[Session], bs: int, router: str,
                                              cache_tokens: int, tier: bool,
                                              cpu: int) -> None:
    """Turns sent in send order, one at a time, as chat prompts of block_text blocks whose
    token count equals the turn's input_tokens: the simulator's cached_tokens never exceed
    the trace's potential (for block sizes dividing the trace's 64)."""
    longest = max(t.input_tokens for s in sessions for t in s.turns)
    cfg = _cfg(preset="instant", instances=2, router=router, block_size=bs,
               cache_blocks=max(cache_tokens, longest + 64) // bs, cpu_offload_blocks=cpu,
               shared_tier=SharedTier(capacity_blocks=300) if tier else None)
    cl = Cluster(cfg)
    pot = potential_cached_tokens(sessions)
    t = 0.0
    for s, turn in iter_turns_in_send_order(sessions):
        text = _chat_content(turn)
        tokens = cl.hasher.chat_tokens([("user", text)])
        assert tokens.size == max(turn.input_tokens, CHAT_OVERHEAD)
        req = cl.make_request(tokens, max_tokens=1, ignore_eos=True, session=s.session_id)
        t = _run_one(cl, req, t) + 0.001
        assert req.cached_tokens <= pot[(s.session_id, turn.turn)]
        assert req.cached_tokens % bs == 0


@pytest.mark.parametrize("router", ["round_robin", "least_loaded", "session_affinity",
                                    "cache_aware", "random"])
def test_every_router_finishes_a_mixed_load(router: str) -> None:
    cl = Cluster(_cfg(instances=3, router=router, speedup=1.0))
    sched = []
    for i in range(30):
        toks = _prompt(cl, 10 + i % 5, salt=i % 4)
        sched.append((i * 0.05, cl.make_request(toks, max_tokens=8, ignore_eos=True,
                                                session=f"s{i % 4}")))
    done = run_virtual(cl, sched)
    assert len(done) == 30 and all(r.generated == 8 for r in done)
    if router == "session_affinity":
        by_session: dict[str, set[int]] = {}
        for r in done:
            by_session.setdefault(r.session or "", set()).add(r.instance)
        assert all(len(v) == 1 for v in by_session.values())
    assert sum(inst.gpu.reserved for inst in cl.instances) == 0


def test_cache_aware_router_follows_cached_blocks_within_load_bound() -> None:
    cl = Cluster(_cfg(preset="instant", instances=3, router="cache_aware",
                      cache_aware_max_imbalance=1))
    a, b = _prompt(cl, 20, salt=1), _prompt(cl, 20, salt=2)
    t = 0.0
    first = cl.make_request(a, max_tokens=1, ignore_eos=True)
    t = _run_one(cl, first, t) + 1.0
    other = cl.make_request(b, max_tokens=1, ignore_eos=True)
    t = _run_one(cl, other, t) + 1.0
    again = cl.make_request(a, max_tokens=1, ignore_eos=True)
    _run_one(cl, again, t)
    assert again.instance == first.instance and again.cached_tokens == 1280
    # Load bound: with two requests queued on the instance holding the prefix (and none
    # elsewhere), it is 2 above the least loaded, beyond the allowed imbalance of 1.
    home = cl.instances[first.instance]
    for _ in range(2):
        home.add(cl.make_request(b, max_tokens=1, ignore_eos=True))
    busy = cl.make_request(a, max_tokens=1, ignore_eos=True)
    assert cl.router.choose(busy, cl.instances) != first.instance
