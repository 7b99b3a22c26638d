"""Eviction of a *tie group* in closed form, for ``kvcache.PrefixCache.evict``.

Requests whose prefills end in the same engine step insert their blocks at the same time,
so their chains share a last-use time ``t``. LRU with ties broken deepest first then evicts
them level by level: each heap pop takes the head chain (deepest, then oldest entry) down to
the next head's depth ``D`` and pushes it back at ``D - 1``, one or two blocks a pop. Done pop
by pop (as the per-block cache did) that is most of the eviction work in agentic runs.

When the group's entries all sit at depths ``e`` or ``e - 1`` (where an eviction walk stops
on a tie), every pop sends the head to the back of the queue, so with ``k`` chains and
``delta_i`` the depth popped at pop ``i`` (``delta_0..delta_k-1``: the queue as gathered)

    delta_(j + k - 1) = delta_j - 1  (j >= 1),   blocks after P pops = P + delta_0 - delta_P

and chain ``i mod k`` ends pop ``i`` with its tail at ``delta_(i+1) - 1`` and a heap entry
numbered ``seq + i + 1``. That holds until a chain would leave its node (its start: the
general walk handles the parent), an entry outside the group could become the head (the
first other entry of time ``t``), or the quota runs out; ``evict_tied`` finds the largest
number of pops ``P`` before any of these and applies them at once, leaving the same heap
entries (same keys and sequence numbers) as ``P`` single pops would.
"""

from __future__ import annotations

import heapq
from typing import Any

Entry = tuple[float, int, int, int]  # (T, -depth, seq, hash)


def evict_tied(heap: list[Entry], tails: dict[int, Any], seq: int, t: float, e: int,
               q: int) -> tuple[int, int]:
    """Apply the pops of the tie group at the heap top; return (blocks evicted, pops).

    Called where a walk stopped on a tie: a chain's new tail at ``e - 1`` (already pushed,
    numbered ``seq``) below an entry of time ``t`` at depth ``e``; ``q`` blocks may go. Pop
    ``i`` of the group's own is numbered ``seq + i + 1``. Returns (0, 0), changing nothing
    but the heap's layout, when the group is not plain (a stale or duplicate entry)."""
    group: list[Entry] = []
    while heap and heap[0][0] == t and -heap[0][1] >= e - 1:
        group.append(heapq.heappop(heap))
    k = len(group)
    chains: list[Any] = []  # kvcache._Node (not imported: kvcache imports this)
    seen: set[int] = set()
    for ent in group:
        nd = tails.get(ent[3])
        if nd is None or nd.tt != t or nd.children or nd.pins or id(nd) in seen:
            break  # a stale or duplicate entry: the pops are not a plain rotation
        seen.add(id(nd))
        chains.append(nd)
    pops = 0
    if len(chains) == k >= 2:
        depth = [-ent[1] for ent in group]
        room = [nd.start for nd in chains]
        d_other = -heap[0][1] if heap and heap[0][0] == t else None
        pops = _most_pops(depth, room, d_other, q)
    if pops == 0:
        for ent in group:
            heapq.heappush(heap, ent)
        return 0, 0
    d0, rest, p = depth[0], depth[1:], k - 1
    for r, nd in enumerate(chains):
        if r >= pops:  # not popped: keeps its entry
            heapq.heappush(heap, group[r])
            continue
        last = r + (pops - 1 - r) // k * k  # its last pop
        w, u = divmod(last, p)  # delta_(last + 1)
        tail = rest[u] - w - 1
        own = nd.hashes
        del tails[own[nd.end - 1]]
        nd.end = tail + 1
        tails[own[tail]] = nd
        heapq.heappush(heap, (t, -tail, seq + last + 1, own[tail]))
    w, u = divmod(pops - 1, p)
    return pops + d0 - (rest[u] - w), pops


def _most_pops(depth: list[int], start: list[int], d_other: int | None, q: int) -> int:
    """The largest P whose pops all stay plain (see the module docstring); 0 if none."""
    k = len(depth)
    p = k - 1
    rest = depth[1:]

    def delta(j: int) -> int:  # depth popped at pop j >= 1
        w, u = divmod(j - 1, p)
        return rest[u] - w

    def ok(n: int) -> bool:
        dn = delta(n)
        if n + depth[0] - dn > q or (d_other is not None and dn <= d_other):
            return False
        for r in range(min(k, n)):
            last = r + (n - 1 - r) // k * k
            if delta(last + 1) - 1 < start[r]:  # its tail would leave its node
                return False
        return True

    # chain r is popped ceil((P - r) / k) times, each taking its tail at least one lower
    hi = min(q, min(r + k * (depth[r] - start[r]) for r in range(k)))
    lo = 0
    while lo < hi:  # ok() holds for 0 and is downward closed
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
