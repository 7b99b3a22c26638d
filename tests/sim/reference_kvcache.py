"""FROZEN REFERENCE (tests only, never imported by the product): the per-block prefix cache
that ``agentbench.sim.kvcache`` replaced, kept verbatim below so that
``tests/sim/test_sim_cache_equivalence.py`` can check the run-length cache against it.

A paged prefix cache of prefix-chained blocks, with LRU eviction and pinning.

Each block is known by the hash of its whole prefix (see ``prompt.PromptHasher``), so a
block is reusable only when every block before it matches, as in vLLM's prefix caching.
The cache keeps one invariant: a cached block's parent is cached. Blocks are inserted
contiguously after a cached prefix and only *leaves* (blocks with no cached child) are
evicted, so presence along a request's hash list is monotone and a lookup is a binary
search: O(log n) per request instead of a walk over a 142K-token context.

Eviction is LRU over unpinned leaves. A request touches only its deepest block; a block's
effective last use is the latest touch in its subtree, carried up to the parent when a
child is evicted, so the order equals LRU over all blocks with ties broken tail first
(vLLM frees a request's blocks tail first). A request pins its deepest block, which
protects the whole path above it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


class PrefixCache:
    """``capacity`` blocks; ``reserved`` blocks are held by running requests (not cached).

    Per-block state lives in parallel dicts keyed by block hash (parent, children count,
    last touch, depth; pins only for pinned blocks) so that inserting a request's new blocks
    is a few C-level ``dict.update`` calls rather than a Python loop.
    """

    def __init__(self, capacity: int, name: str = "gpu") -> None:
        if capacity <= 0:
            raise ValueError("cache capacity must be positive")
        self.capacity = capacity
        self.name = name
        self.reserved = 0
        self.evictions = 0
        self._touch: dict[int, float] = {}  # presence + last use
        self._parent: dict[int, int | None] = {}
        self._children: dict[int, int] = {}
        self._depth: dict[int, int] = {}
        self._pins: dict[int, int] = {}
        self._heap: list[tuple[float, int, int, int]] = []  # (touch, -depth, seq, hash)
        self._seq = 0

    def __len__(self) -> int:
        return len(self._touch)

    def __contains__(self, h: int) -> bool:
        return h in self._touch

    @property
    def free(self) -> int:
        """Blocks neither cached nor reserved."""
        return self.capacity - len(self._touch) - self.reserved

    def match(self, hashes: Sequence[int], limit: int | None = None) -> int:
        """Number of leading blocks of ``hashes[:limit]`` that are cached."""
        hi = len(hashes) if limit is None else min(limit, len(hashes))
        blocks = self._touch
        if hi == 0 or hashes[0] not in blocks:
            return 0
        if hashes[hi - 1] in blocks:
            return hi
        lo = 1  # hashes[lo - 1] cached, hashes[hi - 1] not
        while lo < hi - 1:
            mid = (lo + hi) // 2
            if hashes[mid - 1] in blocks:
                lo = mid
            else:
                hi = mid
        return lo

    def touch(self, h: int, now: float) -> None:
        """Mark block ``h`` (and so its whole prefix) used at ``now``."""
        if now > self._touch[h]:
            self._touch[h] = now
        if not self._children[h] and h not in self._pins:
            self._push(h)

    def pin(self, h: int) -> None:
        if h not in self._touch:
            raise KeyError(h)
        self._pins[h] = self._pins.get(h, 0) + 1

    def unpin(self, h: int) -> None:
        n = self._pins[h] - 1
        if n:
            self._pins[h] = n
            return
        del self._pins[h]
        if not self._children[h]:
            self._push(h)

    def insert(self, hashes: Sequence[int], end: int, now: float, *,
               make_room: bool = False) -> int:
        """Cache ``hashes[:end]`` (the prefix already cached is kept); return blocks added.

        With ``make_room`` LRU blocks are evicted to fit (a tier); without it the caller has
        reserved the space. Blocks that do not fit are left out (the prefix that fits stays).
        """
        k = self.match(hashes, end)
        if k == end:
            if k:
                self.touch(hashes[k - 1], now)
            return 0
        parent = hashes[k - 1] if k else None
        if make_room:
            need = end - k
            if self.free < need:
                if parent is not None:
                    self.pin(parent)  # keep the prefix we extend
                self.evict(need - self.free)
                if parent is not None:
                    self.unpin(parent)
            end = k + min(need, max(0, self.free))
            if end == k:
                return 0
        new = list(hashes[k:end])
        self._touch.update(dict.fromkeys(new, now))
        self._parent.update(zip(new, [parent, *new[:-1]], strict=True))
        self._depth.update(zip(new, range(k, end), strict=True))
        self._children.update(dict.fromkeys(new, 1))
        self._children[new[-1]] = 0
        if parent is not None:
            self._children[parent] += 1
        self._push(new[-1])
        return end - k

    def evict(self, n: int) -> int:
        """Evict up to ``n`` unpinned leaf blocks in LRU order; return how many went."""
        done = 0
        heap = self._heap
        touch_of, parent_of, children, depth_of, pins = (
            self._touch, self._parent, self._children, self._depth, self._pins)
        while done < n and heap:
            t, _, _, h = heapq.heappop(heap)
            if touch_of.get(h) != t or children[h] or h in pins:
                continue  # stale entry
            while True:  # evict h, then walk up while the parent is the next LRU leaf
                del touch_of[h], children[h], depth_of[h]
                p = parent_of.pop(h)
                done += 1
                if p is None:
                    break
                c = children[p] - 1
                children[p] = c
                if touch_of[p] < t:
                    touch_of[p] = t
                if c or p in pins:
                    break
                pt = touch_of[p]
                if done < n and (not heap or (pt, -depth_of[p]) <= heap[0][:2]):
                    h, t = p, pt
                    continue
                self._push(p)
                break
        self.evictions += done
        if len(heap) > 4 * len(touch_of) + 1024:
            self._rebuild_heap()
        return done

    def make_free(self, n: int) -> bool:
        """Evict until ``n`` blocks are free; False when pinned blocks make that impossible."""
        if self.free < n:
            self.evict(n - self.free)
        return self.free >= n

    def depth_of(self, h: int) -> int:
        """Position of cached block ``h`` in its prompt (0: a prompt's first block)."""
        return self._depth[h]

    def referenced_blocks(self, deepest: Sequence[int]) -> int:
        """Distinct cached blocks on the paths above the given (pinned) deepest blocks."""
        seen: set[int] = set()
        parent_of = self._parent
        for h in deepest:
            cur: int | None = h
            while cur is not None and cur not in seen and cur in parent_of:
                seen.add(cur)
                cur = parent_of[cur]
        return len(seen)

    def lru_order(self) -> list[int]:
        """Hashes in the order they would be evicted now (for tests; O(n^2))."""
        clone = PrefixCache(self.capacity, self.name)
        clone._touch, clone._parent = dict(self._touch), dict(self._parent)
        clone._children, clone._depth = dict(self._children), dict(self._depth)
        clone._pins = dict(self._pins)
        clone._rebuild_heap()
        order: list[int] = []
        while True:
            before = list(clone._touch)
            if clone.evict(1) == 0:
                break
            order.extend(h for h in before if h not in clone._touch)
        return order

    def _push(self, h: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self._touch[h], -self._depth[h], self._seq, h))

    def _rebuild_heap(self) -> None:
        self._heap = []
        children, pins = self._children, self._pins
        for h, t in self._touch.items():
            if not children[h] and h not in pins:
                self._seq += 1
                self._heap.append((t, -self._depth[h], self._seq, h))
        heapq.heapify(self._heap)
