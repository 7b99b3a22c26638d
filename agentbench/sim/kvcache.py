"""A paged prefix cache of prefix-chained blocks, with LRU eviction and pinning.

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


class _Block:
    __slots__ = ("parent", "children", "touch", "pins", "depth")

    def __init__(self, parent: int | None, touch: float, depth: int) -> None:
        self.parent = parent
        self.children = 0
        self.touch = touch
        self.pins = 0
        self.depth = depth


class PrefixCache:
    """``capacity`` blocks; ``reserved`` blocks are held by running requests (not cached)."""

    def __init__(self, capacity: int, name: str = "gpu") -> None:
        if capacity <= 0:
            raise ValueError("cache capacity must be positive")
        self.capacity = capacity
        self.name = name
        self.reserved = 0
        self.evictions = 0
        self._blocks: dict[int, _Block] = {}
        self._heap: list[tuple[float, int, int, int]] = []  # (touch, -depth, seq, hash)
        self._seq = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, h: int) -> bool:
        return h in self._blocks

    @property
    def free(self) -> int:
        """Blocks neither cached nor reserved."""
        return self.capacity - len(self._blocks) - self.reserved

    def match(self, hashes: Sequence[int], limit: int | None = None) -> int:
        """Number of leading blocks of ``hashes[:limit]`` that are cached."""
        hi = len(hashes) if limit is None else min(limit, len(hashes))
        blocks = self._blocks
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
        b = self._blocks[h]
        if now > b.touch:
            b.touch = now
        if b.children == 0 and b.pins == 0:
            self._push(h, b)

    def pin(self, h: int) -> None:
        self._blocks[h].pins += 1

    def unpin(self, h: int) -> None:
        b = self._blocks[h]
        b.pins -= 1
        if b.pins == 0 and b.children == 0:
            self._push(h, b)

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
        blocks = self._blocks
        if parent is not None:
            blocks[parent].children += 1
        for i in range(k, end):
            b = _Block(parent, now, i)
            h = hashes[i]
            blocks[h] = b
            if i + 1 < end:
                b.children = 1
            parent = h
        self._push(hashes[end - 1], blocks[hashes[end - 1]])
        return end - k

    def evict(self, n: int) -> int:
        """Evict up to ``n`` unpinned leaf blocks in LRU order; return how many went."""
        done = 0
        heap = self._heap
        blocks = self._blocks
        while done < n and heap:
            touch, _, _, h = heapq.heappop(heap)
            b = blocks.get(h)
            if b is None or b.children or b.pins or b.touch != touch:
                continue  # stale entry
            del blocks[h]
            done += 1
            if b.parent is not None:
                p = blocks[b.parent]
                p.children -= 1
                if b.touch > p.touch:
                    p.touch = b.touch
                if p.children == 0 and p.pins == 0:
                    self._push(b.parent, p)
        self.evictions += done
        if len(heap) > 4 * len(blocks) + 1024:
            self._rebuild_heap()
        return done

    def make_free(self, n: int) -> bool:
        """Evict until ``n`` blocks are free; False when pinned blocks make that impossible."""
        if self.free < n:
            self.evict(n - self.free)
        return self.free >= n

    def referenced_blocks(self, deepest: Sequence[int]) -> int:
        """Distinct cached blocks on the paths above the given (pinned) deepest blocks."""
        seen: set[int] = set()
        blocks = self._blocks
        for h in deepest:
            cur: int | None = h
            while cur is not None and cur not in seen and cur in blocks:
                seen.add(cur)
                cur = blocks[cur].parent
        return len(seen)

    def lru_order(self) -> list[int]:
        """Hashes in the order they would be evicted now (for tests; O(n log n))."""
        order: list[int] = []
        clone = PrefixCache(self.capacity, self.name)
        for h, b in self._blocks.items():
            nb = _Block(b.parent, b.touch, b.depth)
            nb.children, nb.pins = b.children, b.pins
            clone._blocks[h] = nb
        clone._rebuild_heap()
        while True:
            before = set(clone._blocks)
            if clone.evict(1) == 0:
                break
            order.extend(before - set(clone._blocks))
        return order

    def _push(self, h: int, b: _Block) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (b.touch, -b.depth, self._seq, h))

    def _rebuild_heap(self) -> None:
        self._heap = []
        for h, b in self._blocks.items():
            if b.children == 0 and b.pins == 0:
                self._seq += 1
                self._heap.append((b.touch, -b.depth, self._seq, h))
        heapq.heapify(self._heap)
