"""A llama.cpp-style instance: ``llama-server``'s slots instead of vLLM's paged prefix cache
(a preset's ``scheduler: slots``), with the same interface and step costs as
``engine.Instance``. Read from llama.cpp's tools/server (server-context.cpp, server-task.cpp,
server-queue.cpp; commit 0c1e570, vendored by llama-cpp-python 0.3.36):

- Slots (``max_num_seqs`` of them, ``-np``) each keep the tokens of their last request
  (prompt and generated tokens but the last sampled one). A request takes an idle slot
  (``get_available_slot``): the idle non-empty slot whose longest common prefix (LCP) with
  the prompt is the largest share of the prompt, when above 0.1 (``--slot-prompt-
  similarity``), else the least recently released one (never used first, the highest index
  first among those); none idle: it waits, first come first served (``queue_tasks.defer``,
  one popped per release). Its cached tokens are the LCP of the slot's tokens and the
  prompt (``n_past``), never the whole prompt: one token is always computed.
- The host-RAM prompt cache (``--cache-ram``, ``server_prompt_cache``): when the slot was
  picked by LRU, or by similarity while keeping under half its tokens, its tokens are saved
  and the saved prompt that beats the slot's own on both LCP/own length and LCP/prompt
  length (and keeps at least a quarter of its own) is restored into the slot and leaves the
  cache. After every launch each idle slot is saved too (``--cache-idle-slots``, on by
  default). A save is skipped when a saved prompt already holds all of it and drops the
  saved prompts it holds all of; the oldest saved prompts go first beyond the limit.
- KV: with ``-np`` given, each slot owns ``-c / -np`` tokens (``kv_unified`` off): a prompt
  that long is refused, generation stops (``length``) when the slot is full. Unified
  (``unified=True``, llama-server's default without ``-np``; no preset figure asks for it
  yet): one pool of ``-c`` tokens, and idle slots are emptied (after saving) at every
  launch, so reuse goes through the RAM cache unless the slot was just released.
- A step (``update_slots``) decodes one token of every generating slot, then adds prompt
  tokens of the slots processing prompts, in slot order, up to ``n_batch``
  (``max_num_batched_tokens``); the first token comes at the end of the step that ends the
  prompt. The step time is ``self.cost``'s, computed as ``Instance.plan`` does, so decode
  runs (``decoderuns``) work unchanged.

Simplified: prompts are compared by the simulator's block hashes, so an LCP counts whole
blocks of ``block_size`` tokens (llama.cpp counts tokens: per request up to
``block_size - 1`` fewer cached tokens, and the similarity shares as much lower; with
``block_size: 1`` it is token by token); generated tokens never match a prompt; the RAM
cache's limit is in tokens (``ram_tokens``, else the preset's ``ram_cache_tokens``, 0: no
RAM cache; by default 8 GiB over the preset's KV bytes per
token, at least the KV size, as llama.cpp's byte limit works out; unbounded for a fitted
preset, which has no KV bytes); copying a slot to or from RAM costs
``cpu_load_s_per_token`` per token, added to the step that admits the request; unified KV
reserves prompt + output at admission instead of failing a step when the pool is full; the
shared tier, context shift, ``--cache-reuse``, speculative decoding and context
checkpoints (SWA and recurrent models) are not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentbench.sim.engine import Instance, SimRequest
from agentbench.sim.kvcache import PrefixCache
from agentbench.sim.presets import Preset
from agentbench.sim.window import fit_output

#: ``--slot-prompt-similarity`` (common.h): a slot is reused for its prefix above this share
SIMILARITY = 0.1
#: the slot picked by similarity keeps under this share of its tokens: save and look in RAM
KEEP_TO_SAVE = 0.5
#: a saved prompt is restored only if the request keeps at least this share of it
KEEP_TO_LOAD = 0.25
#: ``--cache-ram``'s default, 8192 MiB
CACHE_RAM_BYTES = 8192 << 20


@dataclass(frozen=True, slots=True)
class Held:
    """Tokens a slot or a saved prompt holds: the first ``blocks`` full-block hashes of a
    prompt's ``hashes``, then ``tokens - blocks * block_size`` tokens no prompt shares (the
    prompt's partial last block, the generated tokens), known by ``tail`` (0: none)."""

    hashes: Sequence[int]
    blocks: int
    tokens: int
    tail: int


EMPTY = Held((), 0, 0, 0)


def common_blocks(a: Sequence[int], na: int, b: Sequence[int], nb: int) -> int:
    """Leading blocks ``a[:na]`` and ``b[:nb]`` share. Prefix-chained hashes are equal at
    ``k`` only if all before are, so a binary search finds the last equal one."""
    hi = min(na, nb)
    if hi == 0 or a is b or a[hi - 1] == b[hi - 1]:
        return hi
    lo = 0
    hi -= 1  # a[hi] != b[hi]: the answer is below
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def holds_all(outer: Held, inner: Held) -> bool:
    """Whether ``outer`` starts with all of ``inner``'s tokens (LCP == len(inner))."""
    if inner.tokens > outer.tokens or (inner.tail and inner.tail != outer.tail):
        return False
    return common_blocks(outer.hashes, outer.blocks, inner.hashes, inner.blocks) \
        == inner.blocks


class RamCache:
    """``server_prompt_cache``: saved prompts, oldest first, at most ``limit`` tokens
    (None: unbounded)."""

    def __init__(self, limit: int | None, block_size: int) -> None:
        self.limit = limit
        self.block_size = block_size
        self.states: list[Held] = []
        self.tokens = 0

    def save(self, h: Held) -> int:
        """``alloc``: save ``h``; return the tokens copied (0: skipped)."""
        if h.tokens == 0 or any(holds_all(s, h) for s in self.states):
            return 0
        lim = self.limit
        if lim is not None and h.tokens > lim:
            return 0
        self.states = [s for s in self.states if not holds_all(h, s)]
        self.tokens = sum(s.tokens for s in self.states)
        while self.states and lim is not None and self.tokens + h.tokens > lim:
            self.tokens -= self.states.pop(0).tokens
        self.states.append(h)
        self.tokens += h.tokens
        return h.tokens

    def take(self, own: Held, req: SimRequest) -> Held | None:
        """``load``: the saved prompt to restore into a slot holding ``own`` for ``req``
        (removed from the cache), or None when none beats ``own``."""
        bs, hashes, nh = self.block_size, req.hashes, len(req.hashes)
        n = max(1, req.prompt_tokens)
        lcp = common_blocks(own.hashes, own.blocks, hashes, nh) * bs
        keep_best = lcp / own.tokens if own.tokens else -1.0
        sim_best = lcp / n
        best = -1
        for i, s in enumerate(self.states):
            lcp = common_blocks(s.hashes, s.blocks, hashes, nh) * bs
            keep = lcp / s.tokens
            if keep < KEEP_TO_LOAD:
                continue
            sim = lcp / n
            if keep_best < keep and sim_best < sim:
                keep_best, sim_best, best = keep, sim, i
        if best < 0:
            return None
        got = self.states.pop(best)
        self.tokens -= got.tokens
        return got


@dataclass(eq=False, slots=True)
class Slot:
    index: int
    held: Held = EMPTY  # while idle; a busy slot holds its request's prompt
    req: SimRequest | None = None
    last_used: tuple[float, int] = (-1.0, 0)  # LRU key: (release time, index)


class SlotView(PrefixCache):
    """The slots as the paged cache the router and ``/metrics`` read: ``match`` is the most
    leading blocks any slot holds, ``capacity`` one slot's context in blocks (so
    ``engine.first_fit_error`` refuses a prompt as long as a slot), ``evictions`` the
    blocks of slot contents dropped when a slot takes a request."""

    def __init__(self, slots: list[Slot], capacity: int, block_size: int) -> None:
        super().__init__(capacity, "slots")
        self.slots = slots
        self.block_size = block_size

    def match(self, hashes: Sequence[int], limit: int | None = None, hint: int = 0) -> int:
        bs, best = self.block_size, 0
        for s in self.slots:
            r = s.req
            held, n = (s.held.hashes, s.held.blocks) if r is None else \
                (r.hashes, min(len(r.hashes), r.computed // bs))
            best = max(best, common_blocks(held, n, hashes, len(hashes)))
        return best if limit is None else min(best, limit)


class SlotInstance(Instance):
    """``engine.Instance`` scheduled as llama-server: ``preset.max_num_seqs`` slots over
    ``cache_blocks * block_size`` KV tokens (``-c``), per-slot or ``unified`` KV, a RAM
    prompt cache of ``ram_tokens`` (0: none, -1: unbounded, None: ``ram_default``)."""

    def __init__(self, index: int, preset: Preset, block_size: int, cache_blocks: int, *,
                 ram_tokens: int | None = None, unified: bool = False,
                 speedup: float = 1.0) -> None:
        super().__init__(index, preset, block_size, 1, speedup=speedup)
        n = preset.max_num_seqs
        self.unified = unified
        self.kv_tokens = cache_blocks * block_size
        self.n_ctx_slot = self.kv_tokens if unified else self.kv_tokens // n
        if preset.max_context_tokens and not unified:  # a slot holds the engine's window
            self.n_ctx_slot = max(self.n_ctx_slot, preset.max_context_tokens)
        self.slots = [Slot(i, last_used=(-1.0, -i)) for i in range(n)]
        if ram_tokens is None:  # the preset's, else llama-server's default
            ram_tokens = preset.ram_cache_tokens
        ram = ram_default(preset, self.kv_tokens) if ram_tokens is None else ram_tokens
        self.ram = None if ram == 0 else RamCache(None if ram < 0 else ram, block_size)
        self.gpu = SlotView(self.slots, self.n_ctx_slot // block_size, block_size)
        self._slot_of: dict[int, Slot] = {}  # rid -> the slot of an admitted request
        self._copy_s = 0.0  # RAM copies of this step's admissions
        self._tails = 0  # ids of unshared tails (``Held.tail``) given so far
        self._now = 0.0  # the last plan's or commit's time (an abort's release time)

    def blocks_needed(self, req: SimRequest) -> int:
        """Blocks the prompt and one generated token take: above a slot's blocks only for
        a prompt of ``n_ctx_slot`` tokens or more (llama.cpp's "exceeds the available
        context size"); the output is cut at the slot's end instead."""
        return -(-(req.prompt_tokens + 1) // self.block_size)

    def kv_usage(self) -> float:
        """KV tokens of the requests in slots over the KV size."""
        used = sum(r.computed + r.generated for s in self.slots if (r := s.req) is not None)
        return min(1.0, used / self.kv_tokens)

    # ------------------------------------------------------------ admission

    def _choose(self, req: SimRequest) -> tuple[Slot, bool]:
        """``get_available_slot``: (idle slot, whether to save it and look in RAM)."""
        n, bs = max(1, req.prompt_tokens), self.block_size
        best: Slot | None = None
        sim_best, lcp_best = 0.0, 0
        for s in self.slots:
            h = s.held
            if s.req is not None or h.tokens == 0:
                continue
            lcp = common_blocks(h.hashes, h.blocks, req.hashes, len(req.hashes)) * bs
            sim = lcp / n
            if sim > sim_best and sim > SIMILARITY:
                best, sim_best, lcp_best = s, sim, lcp
        if best is not None:
            return best, lcp_best / best.held.tokens < KEEP_TO_SAVE
        return min((s for s in self.slots if s.req is None), key=lambda s: s.last_used), True

    def _admit(self, req: SimRequest, now: float) -> bool:
        """Launch ``req`` on a slot (an idle one exists): pick it, save/restore through the
        RAM cache, count its cached tokens, save the idle slots. False: unified KV full."""
        fit_output(req, self.n_ctx_slot)  # generation stops when the slot is full
        if self.unified:
            used = sum(r.prompt_tokens + r.output_tokens
                       for s in self.slots if (r := s.req) is not None)
            if used + req.prompt_tokens + req.output_tokens > self.kv_tokens:
                self._blocked = (req, self._releases)
                return False
            self._blocked = None
        slot, update = self._choose(req)
        ram, copied, restored = self.ram, 0, False
        if update and ram is not None:
            copied += ram.save(slot.held)
            got = ram.take(slot.held, req)
            if got is not None:
                slot.held, restored = got, True
                copied += got.tokens
        h = slot.held
        k = min(common_blocks(h.hashes, h.blocks, req.hashes, len(req.hashes)),
                req.match_limit)
        self.gpu.evictions += h.blocks - k
        slot.req, slot.held = req, EMPTY
        self._slot_of[req.rid] = slot
        self._count(req, k * self.block_size, restored, now)
        if ram is not None:  # --cache-idle-slots
            for s in self.slots:
                if s.req is None:
                    copied += ram.save(s.held)
                    if self.unified:
                        self.gpu.evictions += s.held.blocks
                        s.held = EMPTY
        self._copy_s += copied * self.preset.cpu_load_s_per_token
        return True

    def _count(self, req: SimRequest, cached: int, restored: bool, now: float) -> None:
        st = self.stats
        req.cached_tokens = req.computed = cached
        if restored:
            req.cpu_hit_tokens = cached
            st.hits_cpu += cached
        else:
            req.gpu_hit_tokens = cached
            st.hits_gpu += cached
        req.admitted_at = now
        st.requests_admitted += 1
        st.prompt_tokens += req.prompt_tokens
        st.prefix_queries += req.prompt_tokens
        st.prefix_hits += cached

    def _cache_prompt(self, r: SimRequest, now: float) -> None:
        """Prefill done: the slot holds the prompt already (nothing is shared)."""

    def _release(self, r: SimRequest) -> None:
        """``slot.release``: the slot keeps the request's tokens (but the last sampled)."""
        self._releases += 1
        slot = self._slot_of.pop(r.rid, None)
        if slot is None:
            return
        bs = self.block_size
        blocks = min(len(r.hashes), r.computed // bs)
        tokens = r.computed + max(0, r.generated - 1)
        tail = 0
        if tokens != blocks * bs:
            self._tails += 1
            tail = self._tails
        slot.held = Held(r.hashes, blocks, tokens, tail)
        slot.req = None
        slot.last_used = (self._now if r.finished_at is None else r.finished_at, slot.index)

    # ------------------------------------------------------------ step

    def plan(self, now: float) -> float | None:
        """``update_slots``: ``Instance.plan`` (a decode token of every generating slot
        first), with the prompts taken as ``_prefills`` says."""
        self._now = now
        return super().plan(now)

    def _prefills(self, now: float, budget: int, flops: float, kv_read: float,
                  plan: list[tuple[SimRequest, int]]) -> tuple[float, float, float]:
        """Waiting requests that have arrived first take the idle slots, first come first
        served; then prompt tokens of the slots with prompts, in slot order, while the
        token budget lasts; the RAM cache's copies are the step's load seconds."""
        self._launch(now)
        copy_s, self._copy_s = self._copy_s, 0.0
        _, flops, kv_read = self._chunks(self.prefilling, budget, flops, kv_read, plan)
        return flops, kv_read, copy_s

    def _launch(self, now: float) -> None:
        """Waiting requests that have arrived take idle slots, in order; ``prefilling``
        stays in slot order."""
        waiting, slots = self.waiting, len(self.slots)
        while waiting and len(self.decoding) + len(self.prefilling) < slots:
            r = waiting[0]
            if r.arrival > now or not self._admit(r, now):
                break
            waiting.popleft()
            i = self._slot_of[r.rid].index
            pf = self.prefilling
            at = next((j for j, q in enumerate(pf) if self._slot_of[q.rid].index > i), len(pf))
            pf.insert(at, r)

    def commit(self, now: float, stamp: int | None = None) -> list[SimRequest]:
        self._now = now
        return super().commit(now, stamp)

    def reset_cache(self) -> int:
        """Erase every idle slot's cached prompt and the RAM prompt cache (llama.cpp's
        ``POST /slots/{id}?action=erase``); the blocks dropped."""
        bs, n = self.block_size, 0
        for slot in self.slots:
            if slot.req is None and slot.held is not EMPTY:
                n += slot.held.tokens // bs
                slot.held = EMPTY
        if self.ram is not None:
            n += self.ram.tokens // bs
            self.ram.states, self.ram.tokens = [], 0
        self._turn_ends.clear()
        return n


def ram_default(preset: Preset, kv_tokens: int) -> int:
    """The RAM cache's tokens by default: ``--cache-ram`` over the KV bytes per token, at
    least ``kv_tokens`` (``server_prompt_cache::update``); -1 (unbounded) when the preset
    does not say its KV bytes (a fitted preset)."""
    kvb = preset.kv_bytes_per_token
    return max(kv_tokens, int(CACHE_RAM_BYTES // kvb)) if kvb > 0 else -1
