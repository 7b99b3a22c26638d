"""A paged prefix cache of prefix-chained blocks, with LRU eviction and pinning, stored as
runs of blocks so that its work grows with the number of runs, not of blocks.

Each block is known by the hash of its whole prefix (see ``prompt.PromptHasher``), so a
block is reusable only when every block before it matches, as in vLLM's prefix caching.
The cache keeps one invariant: a cached block's parent is cached. Blocks are inserted
contiguously after a cached prefix and only *leaves* (blocks with no cached child) are
evicted.

Semantics (per block). Every block has a last-use time ``T``: set when it is inserted,
raised by ``touch``, and raised to a child's ``T`` when that child is evicted, so a leaf's
``T`` is the latest use anywhere in its former subtree. Eviction is LRU over unpinned
leaves, keyed ``(T, -depth, seq)``: ties go deepest first (vLLM frees a request's blocks
tail first), then by the order the leaf entered the eviction heap. A pinned block protects
its whole path.

Storage (per run). A radix tree whose nodes each cover a contiguous range
``hashes[start:end]`` of an inserted request's hash list (a reference, never a copy, so the
lists must not be mutated; an insert points the path it extends at its own list, which
holds the same hashes there, so older requests' lists are not kept alive). Because hashes
are prefix-chained, a node is found by its first hash and a request matches a whole node
when their hashes agree at the node's last block.
Only a node's tail block can have children other than the next block, be pinned or be
touched (a pin, touch or insert landing mid-node splits the node first), so a node needs
two times: ``tb`` for its body blocks (their insertion time) and ``tt`` for its tail.
Evicting from a node trims its tail in O(1): every block the eviction walk takes from one
node follows from the heap's top, which does not change during the walk; and chains of
equal time, which LRU evicts level by level in turn, are evicted a segment at a time in
closed form (``kvties``).

The eviction heap holds exactly the entries the per-block implementation held
(``tests/reference_kvcache.py``: same pushes, pops, staleness test and rebuilds), so its
order, ties included, is the same.

Blocks on the paths above pinned blocks (``held``: eviction cannot take them) are counted
as pins come and go: a node's ``refs`` counts its pins and its children with refs. Lookups
may start at a node known to be on the way (``match``'s hint, ``insert``'s ``pinned``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from agentbench.sim.kvties import evict_tied


class _Node:
    """Blocks ``hashes[start:end]``, all inserted by one ``insert`` call (number ``ins``)."""

    __slots__ = ("hashes", "start", "end", "tb", "tt", "parent", "children", "pins", "ins",
                 "refs")

    def __init__(self, hashes: Sequence[int], start: int, end: int, tb: float, tt: float,
                 parent: _Node | None, ins: int) -> None:
        self.hashes = hashes
        self.start = start  # depth of the first block
        self.end = end
        self.tb = tb  # T of blocks start..end-2
        self.tt = tt  # T of the tail block end-1; never below tb (it starts there, only rises)
        self.parent = parent  # the node whose tail is block start-1
        self.children = 0  # nodes starting at block ``end``
        self.pins = 0  # pins of the tail block
        self.ins = ins
        self.refs = 0  # pin() calls on the tail + children with refs: held when nonzero


class PrefixCache:
    """``capacity`` blocks; ``reserved`` blocks are held by running requests (not cached).

    Blocks are addressed as ``(hashes, k)``: block ``hashes[k - 1]`` of a request's hash
    list. Pinned blocks are always node tails, so ``unpin`` and ``depth_of`` take a hash.
    """

    def __init__(self, capacity: int, name: str = "gpu") -> None:
        if capacity <= 0:
            raise ValueError("cache capacity must be positive")
        self.capacity = capacity
        self.name = name
        self.reserved = 0
        self.evictions = 0
        self._size = 0  # cached blocks
        self._starts: dict[int, _Node] = {}  # first block's hash -> node
        self._tails: dict[int, _Node] = {}  # tail block's hash -> node
        self._heap: list[tuple[float, int, int, int]] = []  # (T, -depth, seq, hash)
        self._seq = 0
        self._ins = 0  # insert calls that added blocks (the order blocks entered)
        self._last = 0  # the last leaf popped for eviction (lru_order reads it)
        #: blocks on the paths above pinned blocks (``referenced_blocks`` of every pin),
        #: kept as pins come and go: blocks that eviction cannot take
        self.held = 0

    def __len__(self) -> int:
        return self._size

    def __contains__(self, h: int) -> bool:
        """Whether block ``h`` is cached (O(1) for node tails, else a scan: for tests)."""
        return h in self._tails or any(h in nd.hashes[nd.start:nd.end]
                                       for nd in self._tails.values())

    @property
    def free(self) -> int:
        """Blocks neither cached nor reserved."""
        return self.capacity - self._size - self.reserved

    # ------------------------------------------------------------ lookup

    def _walk(self, hashes: Sequence[int], hi: int,
              node: _Node | None = None) -> tuple[int, _Node | None]:
        """Leading cached blocks of ``hashes[:hi]`` and the node holding the last of them
        (from ``node``, a node on the path ending before ``hi``, when given)."""
        if node is None:
            if hi <= 0:
                return 0, None
            node = self._tails.get(hashes[hi - 1])
            if node is not None:  # the whole range is cached, ending at a node's tail
                return hi, node
            node = self._starts.get(hashes[0])
            if node is None:
                return 0, None
        starts = self._starts
        while True:  # node's first block matches
            last = node.end
            if last < hi:
                if node.children:
                    nxt = starts.get(hashes[last])
                    if nxt is not None:  # block ``last`` matches, so all of node does
                        node = nxt
                        continue
            else:
                last = hi
            own = node.hashes
            if own[last - 1] == hashes[last - 1]:
                return last, node
            lo, bad = node.start, last - 1  # diverges inside: own[lo] matches, own[bad] not
            while bad - lo > 1:
                mid = (lo + bad) // 2
                if own[mid] == hashes[mid]:
                    lo = mid
                else:
                    bad = mid
            return lo + 1, node

    def match(self, hashes: Sequence[int], limit: int | None = None, hint: int = 0) -> int:
        """Number of leading blocks of ``hashes[:limit]`` that are cached. ``hint``: a block
        count that may end at a node's tail on the way (where a growing conversation's last
        prompt ended), where the lookup can start; the result does not depend on it."""
        hi = len(hashes) if limit is None else min(limit, len(hashes))
        tails = self._tails  # a hint's block cached means its path is
        node = tails.get(hashes[hint - 1]) if 0 < hint < hi and hashes[hi - 1] not in tails \
            else None
        return self._walk(hashes, hi, node)[0]

    def _split(self, node: _Node, k: int) -> _Node:
        """Cut ``node`` after block ``k - 1`` (start < k < end); return the head part.

        The tail part keeps the object, so its children, pins and heap entries (keyed by
        its tail hash) stay as they are; the head's tail is a body block, with time tb."""
        head = _Node(node.hashes, node.start, k, node.tb, node.tb, node.parent, node.ins)
        head.children = 1
        head.refs = 1 if node.refs else 0  # node's held blocks are now split between the two
        node.start = k
        node.parent = head
        own = node.hashes
        self._starts[own[head.start]] = head
        self._starts[own[k]] = node
        self._tails[own[k - 1]] = head
        return head

    def _tail_node(self, hashes: Sequence[int], k: int) -> _Node:
        """The node whose tail is block ``hashes[k - 1]``, splitting one if needed."""
        node = self._tails.get(hashes[k - 1]) if k > 0 else None
        if node is not None:
            return node
        got, node = self._walk(hashes, k)
        if got < k or node is None:
            raise KeyError(hashes[k - 1] if k > 0 else None)
        return self._split(node, k)

    # ------------------------------------------------------------ use

    def touch(self, hashes: Sequence[int], k: int, now: float) -> None:
        """Mark block ``hashes[k - 1]`` (and so its whole prefix) used at ``now``."""
        node = self._tails.get(hashes[k - 1])
        if node is None:
            got, node = self._walk(hashes, k)
            if got < k or node is None:
                raise KeyError(hashes[k - 1])
        self._touch_in(node, k, now)

    def _touch_in(self, node: _Node, k: int, now: float) -> None:
        """``touch`` of block ``k - 1``, which lies in ``node``."""
        if node.end != k:  # a body block: it has a child, so only its time can change
            if now > node.tb:
                self._split(node, k).tt = now
            return
        if now > node.tt:
            node.tt = now
        if not node.children and not node.pins:
            self._push(node)

    def pin(self, hashes: Sequence[int], k: int) -> None:
        """Protect block ``hashes[k - 1]`` and its path from eviction (counted)."""
        node = self._tail_node(hashes, k)
        node.pins += 1
        self._refer(node, 1)

    def unpin(self, h: int) -> None:
        """Undo one ``pin`` of block ``h``."""
        node = self._tails.get(h)
        if node is None or not node.pins:
            raise KeyError(h)
        self._unpin_node(node)
        self._refer(node, -1)

    def _refer(self, node: _Node | None, d: int) -> None:
        """Add ``d`` (1 or -1) to ``node``'s refs and up the path while a count leaves or
        reaches zero; ``held`` gains or loses those nodes' blocks."""
        n = 0
        while node is not None:
            refs = node.refs
            node.refs = refs + d
            if refs and refs + d:  # held before and after: so is everything above
                break
            n += node.end - node.start
            node = node.parent
        self.held += n * d

    def _unpin_node(self, node: _Node) -> None:
        node.pins -= 1
        if not node.pins and not node.children:
            self._push(node)

    def insert(self, hashes: Sequence[int], end: int, now: float, *,
               make_room: bool = False, pinned: int = 0) -> int:
        """Cache ``hashes[:end]`` (the prefix already cached is kept); return blocks added.

        With ``make_room`` LRU blocks are evicted to fit (a tier); without it the caller has
        reserved the space. Blocks that do not fit are left out (the prefix that fits stays).
        ``pinned``: block ``hashes[pinned - 1]`` is pinned (so cached, a node's tail), where
        the lookup of the cached prefix may start.
        """
        start = self._tails.get(hashes[pinned - 1]) if 0 < pinned < end else None
        k, parent = self._walk(hashes, end, start)
        if k == end:
            if parent is not None:
                self._touch_in(parent, k, now)
            return 0
        if parent is not None and parent.end != k:
            parent = self._split(parent, k)
        if make_room:
            need = end - k
            if self.free < need:
                if parent is not None:
                    parent.pins += 1  # keep the prefix we extend
                self.evict(need - self.free)
                if parent is not None:
                    self._unpin_node(parent)
            end = k + min(need, max(0, self.free))
            if end == k:
                return 0
        self._ins += 1
        node = _Node(hashes, k, end, now, now, parent, self._ins)
        self._starts[hashes[k]] = node
        self._tails[hashes[end - 1]] = node
        if parent is not None:
            parent.children += 1
        up = parent
        while up is not None and up.hashes is not hashes:
            # the path holds hashes[:k] too: point it at this list so that the lists of
            # earlier requests are not kept alive by the nodes they once inserted
            up.hashes = hashes
            up = up.parent
        self._size += end - k
        self._push(node)
        return end - k

    # ------------------------------------------------------------ eviction

    def evict(self, n: int) -> int:
        """Evict up to ``n`` unpinned leaf blocks in LRU order; return how many went.

        Pops the LRU leaf, then walks up its path while the next block up is the next LRU
        leaf (its time and depth at most the heap top's), as the per-block version did one
        block at a time; within a node that walk is a range computed from the heap top.
        Where it stops on a tie, the rotation among chains of equal time that follows is
        applied in closed form (``kvties``)."""
        done = 0
        heap = self._heap
        tails, starts = self._tails, self._starts
        while done < n and heap:
            t, _, _, h = heapq.heappop(heap)
            node = tails.get(h)
            if node is None or node.tt != t or node.children or node.pins:
                continue  # stale entry
            self._last = h
            while True:  # evict node's tail (time t == node.tt), then as much above as goes
                own, s, e = node.hashes, node.start, node.end - 1
                done += 1
                if e > s:  # body blocks left: each takes time max(tb, t) = t as its child goes
                    q = n - done
                    if q > 0:
                        if not heap or t < heap[0][0]:
                            low = s
                        elif t == heap[0][0]:
                            low = max(s, -heap[0][1])  # depths >= the top's go first
                        else:
                            low = e
                        if low < e:
                            m = min(e - low, q)
                            e -= m
                            done += m
                    if e > s:  # stop inside the node: its new tail is the next leaf
                        del tails[own[node.end - 1]]
                        node.end = e
                        tails[own[e - 1]] = node
                        self._push(node)
                        if done < n:  # stopped on a tie: an entry of time t at depth e
                            got, pops = evict_tied(heap, tails, self._seq, t, e, n - done)
                            done += got
                            self._seq += pops
                        break
                del tails[own[node.end - 1]], starts[own[s]]  # the whole node went
                p = node.parent
                if p is None:
                    break
                p.children -= 1
                if p.tt < t:
                    p.tt = t
                if p.children or p.pins:
                    break
                if done < n and (not heap or (p.tt, 1 - p.end) <= heap[0][:2]):
                    node, t = p, p.tt
                    continue
                self._push(p)
                break
        self.evictions += done
        self._size -= done
        if len(heap) > 4 * self._size + 1024:
            self._rebuild_heap()
        return done

    def make_free(self, n: int) -> bool:
        """Evict until ``n`` blocks are free; False when pinned blocks make that impossible."""
        if self.free < n:
            self.evict(n - self.free)
        return self.free >= n

    # ------------------------------------------------------------ inspection

    def depth_of(self, h: int) -> int:
        """Position of cached block ``h`` in its prompt (0: a prompt's first block).

        O(1) for a node tail (every pinned block is one), else a scan."""
        node = self._tails.get(h)
        if node is not None:
            return node.end - 1
        for nd in self._tails.values():
            own = nd.hashes
            for i in range(nd.start, nd.end):
                if own[i] == h:
                    return i
        raise KeyError(h)

    def referenced_blocks(self, deepest: Iterable[int]) -> int:
        """Distinct cached blocks on the paths above the given pinned blocks (node tails,
        so whole nodes; other hashes are ignored)."""
        seen: set[_Node] = set()
        for h in deepest:
            node = self._tails.get(h)
            while node is not None and node not in seen:
                seen.add(node)
                node = node.parent
        return sum(nd.end - nd.start for nd in seen)

    def blocks(self) -> list[int]:
        """Every cached block's hash (for tests; O(n))."""
        return [h for nd in self._tails.values() for h in nd.hashes[nd.start:nd.end]]

    def lru_order(self) -> list[int]:
        """Hashes in the order they would be evicted now (for tests; O(n^2))."""
        clone = PrefixCache(self.capacity, self.name)
        copies: dict[_Node, _Node] = {}
        for nd in sorted(self._tails.values(), key=lambda x: x.start):  # parents first
            c = _Node(nd.hashes, nd.start, nd.end, nd.tb, nd.tt,
                      copies[nd.parent] if nd.parent is not None else None, nd.ins)
            c.children, c.pins = nd.children, nd.pins
            copies[nd] = c
            clone._starts[nd.hashes[nd.start]] = c
            clone._tails[nd.hashes[nd.end - 1]] = c
        clone._size = self._size
        clone._rebuild_heap()
        order: list[int] = []
        while clone.evict(1):
            order.append(clone._last)  # one block at a time: always the popped leaf
        return order

    # ------------------------------------------------------------ heap

    def _push(self, node: _Node) -> None:
        self._seq += 1
        d = node.end - 1
        heapq.heappush(self._heap, (node.tt, -d, self._seq, node.hashes[d]))

    def _rebuild_heap(self) -> None:
        """The heap of every unpinned leaf, numbered in insertion order (as the per-block
        version numbered its dict of blocks, which kept insertion order)."""
        leaves = [nd for nd in self._tails.values() if not nd.children and not nd.pins]
        leaves.sort(key=lambda nd: (nd.ins, nd.end))
        heap = []
        for nd in leaves:
            self._seq += 1
            d = nd.end - 1
            heap.append((nd.tt, -d, self._seq, nd.hashes[d]))
        heapq.heapify(heap)
        self._heap = heap
