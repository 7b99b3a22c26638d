"""The run-length prefix cache (``agentbench.sim.kvcache``) behaves exactly as the per-block
one it replaced (``tests/sim/reference_kvcache.py``): random operation sequences that mimic the
engine (prefix-sharing requests built as hash chains, match / pin / touch / insert / unpin /
evict / make_free, make_room inserts, tiny capacities so eviction is constant, many equal
times so the tie-breaks matter) give the same results, the same cached blocks, the same
eviction order and even the same eviction heap after every step; and whole simulated runs
give the same per-request results with either cache."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbench.scenario.model import SharedTier, SimulatedEndpoint
from agentbench.sim import cluster as cluster_mod
from agentbench.sim import engine as engine_mod
from agentbench.sim.cluster import Cluster
from agentbench.sim.kvcache import PrefixCache
from agentbench.sim.virtual import run_virtual
from tests.sim.reference_kvcache import PrefixCache as RefCache

# time steps: mostly ties and small steps, sometimes backwards (the cache must not care)
DT = (0.0, 0.0, 0.0, 1.0, 1.0, 2.5, -1.0)


class Pair:
    """The reference and the new cache, driven through the same operations and compared."""

    def __init__(self, capacity: int) -> None:
        self.ref = RefCache(capacity)
        self.new = PrefixCache(capacity)
        self.reqs: list[list[int]] = []
        self.pins: list[int] = []  # pinned block hashes (one entry per pin)
        self.fresh = 1
        self.now = 0.0

    # -------------------------------------------------------- requests and time

    def new_request(self, a: int, b: int, c: int) -> list[int]:
        """A chain: a prefix of an earlier request (all of it, often: the next turn) plus
        fresh blocks; fresh ints never repeat, so equal hashes mean equal prefixes."""
        base: list[int] = []
        if self.reqs and b % 5:
            parent = self.reqs[a % len(self.reqs)]
            base = parent[: len(parent) - (c % 3 if b % 2 else c % (len(parent) + 1))]
        extra = (b // 5) % 9 + (0 if base and c % 4 == 0 else 1)
        req = base + list(range(self.fresh, self.fresh + extra))
        self.fresh += extra
        if req:
            self.reqs.append(req)
        return req

    def req(self, a: int) -> list[int] | None:
        return self.reqs[a % len(self.reqs)] if self.reqs else None

    def tick(self, x: int) -> float:
        self.now += DT[x % len(DT)]
        return self.now

    # -------------------------------------------------------- operations

    def step(self, op: int, a: int, b: int, c: int) -> None:
        ref, new = self.ref, self.new
        op %= 11
        if op == 0:
            self.new_request(a, b, c)
            return
        if op == 7:
            n = a % 6
            assert ref.evict(n) == new.evict(n)
            return
        if op == 8:
            n = a % (ref.capacity + 2)
            assert ref.make_free(n) == new.make_free(n)
            return
        if op == 9:
            ref.reserved = new.reserved = a % (ref.capacity // 2 + 1)
            return
        if op == 5:
            if self.pins:
                h = self.pins.pop(a % len(self.pins))
                ref.unpin(h)
                new.unpin(h)
            return
        r = self.req(a)
        if r is None:
            return
        limit = None if b % 3 == 0 else b % (len(r) + 1)
        k = ref.match(r, limit)
        assert new.match(r, limit) == k
        assert new.match(r, limit, c % (len(r) + 1)) == k  # a hint only changes the lookup
        if op == 1:
            return
        if op in (2, 3):  # insert: without make_room only when it fits, as the engine does
            end = len(r) - (c % 2) * (c // 2 % len(r))
            now = self.tick(b)
            room = op == 3 or ref.free < end - ref.match(r, end)
            assert ref.insert(r, end, now, make_room=room) == \
                new.insert(r, end, now, make_room=room)
            return
        if k == 0:
            return
        j = 1 + c % k  # a cached block of r
        if op == 4:
            ref.pin(r[j - 1])
            new.pin(r, j)
            self.pins.append(r[j - 1])
        elif op == 6:
            now = self.tick(c)
            ref.touch(r[j - 1], now)
            new.touch(r, j, now)
        elif op == 10:
            self.engine_turn(r, k, b, c)

    def engine_turn(self, r: list[int], k: int, b: int, c: int) -> None:
        """As ``Instance._admit`` then ``_cache_prompt``: pin the match, make room (or give
        up), touch; then cache the whole prompt, move the pin to its tail, touch it."""
        ref, new = self.ref, self.new
        ref.pin(r[k - 1])
        new.pin(r, k)
        need = len(r) - k + b % 3
        if ref.free < need:
            ok = ref.make_free(need)
            assert new.make_free(need) == ok
            if not ok:
                ref.unpin(r[k - 1])
                new.unpin(r[k - 1])
                return
        now = self.tick(b)
        ref.touch(r[k - 1], now)
        new.touch(r, k, now)
        now = self.tick(c)
        assert ref.insert(r, len(r), now) == new.insert(r, len(r), now, pinned=k)
        n = len(r)
        ref.pin(r[n - 1])
        new.pin(r, n)
        ref.unpin(r[k - 1])
        new.unpin(r[k - 1])
        ref.touch(r[n - 1], now)
        new.touch(r, n, now)
        self.pins.append(r[n - 1])

    # -------------------------------------------------------- comparison

    def check(self, orders: bool = True) -> None:
        ref, new = self.ref, self.new
        assert sorted(new.blocks()) == sorted(ref._touch)
        assert len(new) == len(ref) and new.free == ref.free
        assert new.evictions == ref.evictions
        assert sorted(new._heap) == sorted(ref._heap)  # same entries and sequence numbers
        assert new._seq == ref._seq
        for r in self.reqs:
            assert new.match(r) == ref.match(r)
        for h in self.pins:
            assert new.depth_of(h) == ref.depth_of(h)
            assert h in new
        assert new.referenced_blocks(self.pins) == ref.referenced_blocks(self.pins)
        assert new.held == ref.referenced_blocks(self.pins)  # counted as pins come and go
        if orders:
            assert new.lru_order() == ref.lru_order()


OPS = st.lists(st.tuples(st.integers(0, 10), st.integers(0, 1 << 16),
                         st.integers(0, 1 << 16), st.integers(0, 1 << 16)), max_size=80)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, capacity=st.integers(1, 30))
def test_same_as_reference_after_every_step(ops: list[tuple[int, int, int, int]],
                                            capacity: int) -> None:
    pair = Pair(capacity)
    for op in ops:
        pair.step(*op)
        pair.check()


@pytest.mark.parametrize("seed", range(40))
def test_same_as_reference_on_long_random_runs(seed: int) -> None:
    """Longer sequences than Hypothesis draws, larger caches, the order checked now and
    then (it costs O(n^2))."""
    rng = random.Random(seed)
    pair = Pair(rng.choice([8, 40, 150, 600]))
    weights = [3, 2, 3, 3, 3, 3, 3, 2, 1, 1, 6]
    for i in range(1500):
        op = rng.choices(range(11), weights)[0]
        pair.step(op, rng.getrandbits(16), rng.getrandbits(16), rng.getrandbits(16))
        pair.check(orders=i % 97 == 0)
    pair.check()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 40), st.integers(1, 60),
                                 st.integers(0, 3)), min_size=2, max_size=9),
       quotas=st.lists(st.integers(1, 90), min_size=1, max_size=12),
       extra=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 1 << 16)), max_size=8))
def test_tie_groups_evict_as_the_reference(chains: list[tuple[int, int, int, int]],
                                           quotas: list[int],
                                           extra: list[tuple[int, int]]) -> None:
    """Long chains inserted at one time (or a few), branching off each other at random
    depths, some touched again at the same time (duplicate heap entries) or pinned, then
    evicted in random quotas: the tie rotation (``kvties``) against pop-by-pop."""
    pair = Pair(400)
    for parent, cut, extra_len, when in chains:
        base: list[int] = []
        if pair.reqs and parent:
            prev = pair.reqs[parent % len(pair.reqs)]
            base = prev[: cut % (len(prev) + 1)]
        r = base + list(range(pair.fresh, pair.fresh + extra_len))
        pair.fresh += extra_len
        pair.reqs.append(r)
        now = float(when // 2)  # mostly equal times
        assert pair.ref.insert(r, len(r), now) == pair.new.insert(r, len(r), now)
        if when == 3:  # touched again at once: a second, equal entry for its leaf
            pair.ref.touch(r[-1], now)
            pair.new.touch(r, len(r), now)
    pair.check()
    for i, n in enumerate(quotas):
        if i < len(extra):
            pair.step(extra[i][0], extra[i][1], extra[i][1] >> 3, extra[i][1] >> 6)
        assert pair.ref.evict(n) == pair.new.evict(n)
        pair.check(orders=i == len(quotas) - 1)


def test_heap_rebuild_is_the_same() -> None:
    """Touching leaves over and over grows the heap past 4 x blocks + 1024: both rebuild
    it at the same eviction, numbering the leaves in insertion order."""
    pair = Pair(60)
    for i in range(12):  # 12 chains of 5 blocks, the odd ones branching off the previous
        base = pair.reqs[-1][:2] if i % 2 else []
        pair.reqs.append(base + list(range(100 * i + 1, 100 * i + 6)))
        pair.step(3, i, 0, 0)
    rng = random.Random(7)
    big = 0
    for i in range(3000):
        r = rng.choice(pair.reqs[4:])  # 0-3 stay LRU: evicting pops few stale entries
        k = pair.ref.match(r)
        if k:  # mostly a leaf: each touch of an unpinned leaf pushes an entry
            k -= rng.choice([0, 0, 0, 1, 2]) if k > 3 else 0
            now = pair.tick(rng.getrandbits(8))
            pair.ref.touch(r[k - 1], now)
            pair.new.touch(r, k, now)
        big = max(big, len(pair.ref._heap))
        if i % 1500 == 1499:
            pair.step(7, 1, 0, 0)
            pair.check(orders=False)
    assert big > 4 * len(pair.ref) + 1024 and len(pair.ref._heap) < big  # it rebuilt
    pair.check()


def test_mid_node_pin_touch_and_branch_split_runs() -> None:
    c = PrefixCache(20)
    a = [1, 2, 3, 4, 5, 6]
    assert c.insert(a, 6, now=1.0) == 6
    c.pin(a, 3)  # block 3 is mid-run: the run splits, 1-2-3 pinned
    assert c.held == 3
    assert c.depth_of(3) == 2 and c.evict(20) == 3 and c.match(a) == 3
    c.touch(a, 2, now=5.0)  # mid-node touch: 2 now outlives 3
    b = [1, 2, 9]
    assert c.insert(b, 3, now=2.0) == 1  # a branch off block 2
    c.pin(b, 3)
    assert c.held == 4
    c.unpin(3)
    assert c.held == 3
    c.unpin(9)
    assert c.held == 0
    assert c.lru_order() == [3, 9, 2, 1]  # 3 (t=1), 9 (t=2), then 2 with its own t=5
    assert c.referenced_blocks([9]) == 3 and len(c) == 4


# ------------------------------------------------------------------ engine, end to end


class RefAdapter(RefCache):
    """The reference behind the new cache's (hashes, k) calls (its own code calls pin and
    touch with a hash)."""

    def match(self, hashes: Sequence[int], limit: int | None = None, hint: int = 0) -> int:
        return super().match(hashes, limit)

    def insert(self, hashes: Sequence[int], end: int, now: float, *,
               make_room: bool = False, pinned: int = 0) -> int:
        return super().insert(hashes, end, now, make_room=make_room)

    @property
    def held(self) -> int:
        """Blocks on the paths above pinned blocks (the new cache counts them as it goes)."""
        return self.referenced_blocks(list(self._pins))

    def pin(self, hashes: Sequence[int] | int, k: int = 0) -> None:  # type: ignore[override]
        super().pin(hashes[k - 1] if isinstance(hashes, Sequence) else hashes)

    def touch(self, hashes: Sequence[int] | int, k: float,  # type: ignore[override]
              now: float | None = None) -> None:
        if isinstance(hashes, Sequence):
            assert now is not None
            super().touch(hashes[int(k) - 1], now)
        else:
            super().touch(hashes, k)


def _simulate(cfg: SimulatedEndpoint, seed: int) -> list[tuple[object, ...]]:
    """Agentic sessions (growing shared prefixes, some forks) on a virtual clock."""
    cl = Cluster(cfg)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    sched = []
    for s in range(12):
        n = rng.randint(200, 3000)
        context = nrng.integers(0, 1000, size=n + 10 * 800)
        t = rng.uniform(0, 20)
        for _ in range(10):
            toks = cl.hasher.id_tokens(context[:n])
            sched.append((t, cl.make_request(toks, max_tokens=rng.randint(1, 40),
                                             ignore_eos=True, session=f"s{s % 7}")))
            n += rng.randint(0, 800)
            t += rng.choice([0.0, rng.uniform(0, 3)])
    done = run_virtual(cl, sched)
    out: list[tuple[object, ...]] = [
        (r.rid, r.instance, r.cached_tokens, r.gpu_hit_tokens, r.cpu_hit_tokens,
         r.shared_hit_tokens, r.admitted_at, r.first_token_at, r.finished_at)
        for r in done]
    out += [(i.gpu.evictions, len(i.gpu), i.stats.steps) for i in cl.instances]
    return out


@pytest.mark.parametrize("kw", [
    {"router": "session_affinity", "cache_blocks": 900},
    {"router": "cache_aware", "cache_blocks": 700, "cpu_offload_blocks": 500},
    {"router": "round_robin", "cache_blocks": 800,
     "shared_tier": SharedTier(capacity_blocks=1200, load_s_per_token=1e-6)},
    {"router": "least_loaded", "preset": "instant", "cache_blocks": 600,
     "cpu_offload_blocks": 300, "shared_tier": SharedTier(capacity_blocks=400)},
])
def test_simulated_runs_identical_with_either_cache(kw: dict[str, object],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = SimulatedEndpoint.model_validate({"kind": "simulated", "preset": "h200-llama3-70b",
                                            "instances": 3, "block_size": 16, **kw})
    new = _simulate(cfg, 3)
    monkeypatch.setattr(engine_mod, "PrefixCache", RefAdapter)
    monkeypatch.setattr(cluster_mod, "PrefixCache", RefAdapter)
    ref = _simulate(cfg, 3)
    assert new == ref
    assert sum(row[0] for row in new[-3:]) > 0  # type: ignore[misc]  # it did evict
