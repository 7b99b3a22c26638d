"""One simulated inference instance: a vLLM-like continuous-batching scheduler over a paged
prefix cache, in simulated seconds and free of any clock or I/O.

A step is planned (``plan``: admit waiting requests FCFS, match their prefixes, reserve
blocks (``admission``), give every running decode one token and prefills chunks of the
token budget) and then committed at its end time (``commit``: finished prefills cache
their blocks and emit their first token, decodes emit one token, finished requests release
their blocks). The async driver in ``cluster.py`` sleeps between the two; a benchmark may
call them back-to-back on a virtual clock, where ``decoderuns`` advances runs of
decode-only steps in bulk.

Simplifications (documented): a request reserves blocks for its whole prompt and
``max_tokens`` at admission, so there is no preemption; prompt blocks enter the prefix cache
when the prefill completes (not block by block); output blocks are never cached (replayed
prompts carry the trace's text, not the generated one); tier loads are synchronous and add
to the step in which the request is admitted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from agentbench.sim.admission import admit, first_fit_error, tier_loads
from agentbench.sim.cost import step_cost
from agentbench.sim.kvcache import PrefixCache
from agentbench.sim.presets import Preset
from agentbench.sim.request import InstanceStats, SimRequest

__all__ = ["Instance", "InstanceStats", "SimRequest", "first_fit_error"]


class Instance:
    """A paged KV cache plus a continuous-batching scheduler with a token budget per step."""

    def __init__(self, index: int, preset: Preset, block_size: int, cache_blocks: int,
                 cpu_blocks: int = 0, shared: PrefixCache | None = None,
                 shared_load_s_per_token: float | None = None, speedup: float = 1.0,
                 nvme: tuple[int, float, float] | None = None,
                 latency: tuple[float, float] = (0.0, 0.0)) -> None:
        """``nvme``: an NVMe tier's (blocks, seconds per token, seconds per load);
        ``latency``: seconds per load from the CPU and the shared tier."""
        self.index = index
        self.speedup = speedup
        self.preset = preset
        self.block_size = block_size
        self.gpu = PrefixCache(cache_blocks, "gpu")
        self.cpu = PrefixCache(cpu_blocks, "cpu") if cpu_blocks > 0 else None
        self.nvme = PrefixCache(nvme[0], "nvme") if nvme is not None else None
        self.nvme_load, self.nvme_latency = (nvme[1], nvme[2]) if nvme is not None \
            else (0.0, 0.0)
        self.cpu_latency, self.shared_latency = latency
        self.shared = shared
        self.shared_load = (preset.shared_load_s_per_token if shared_load_s_per_token is None
                            else shared_load_s_per_token)
        self.waiting: deque[SimRequest] = deque()
        self.decoding: list[SimRequest] = []  # replaced on change, never mutated in place
        self.prefilling: list[SimRequest] = []
        self.stats = InstanceStats()
        self._releases = 0  # requests that gave their blocks back (finished or aborted)
        self._blocked: tuple[SimRequest, int] | None = None  # (head, releases) that failed
        self._decode_ctx = 0  # sum of context tokens over self.decoding
        self._dec_batch: Sequence[SimRequest] = ()  # decodes of the planned step
        self._prefill_plan: Sequence[tuple[SimRequest, int]] = ()  # (request, prompt tokens)
        self._dirty = False  # an aborted request still sits in decoding/prefilling
        #: blocks a session's last prompt cached: where its next prompt's lookup may start
        self._turn_ends: dict[str, int] = {}
        #: the step-time model (``cost.py``): every step's duration comes from it
        self.cost = step_cost(preset)
        #: blocks a running request holds besides its tokens' (sliding windows, linear
        #: states: the preset's sequence_kv_bytes in blocks of this instance's size)
        kvb = preset.kv_bytes_per_token
        self.seq_blocks = int(-(-preset.sequence_kv_bytes // (kvb * block_size))) \
            if preset.sequence_kv_bytes and kvb else 0
        #: prefill-only requests whose prefill ended (``SimRequest.handoff``), for the
        #: cluster to move to a decode instance (it empties the list)
        self.handed: list[SimRequest] = []
        #: "prefill" or "decode" in a disaggregated endpoint; "" when it does both
        self.role = ""

    def reset_cache(self) -> int:
        """Drop every cached block no request holds (vLLM's ``/reset_prefix_cache``): the
        GPU and CPU tiers, and the session hints; the blocks dropped."""
        n = self.gpu.evict(len(self.gpu))
        if self.cpu is not None:
            n += self.cpu.evict(len(self.cpu))
        if self.nvme is not None:
            n += self.nvme.evict(len(self.nvme))
        self._turn_ends.clear()
        return n

    # ------------------------------------------------------------ queue

    @property
    def running(self) -> list[SimRequest]:
        """Admitted requests (prefilling or decoding), aborted ones excluded."""
        return [r for r in self.prefilling + self.decoding if not r.aborted]

    @property
    def load(self) -> int:
        """Requests on this instance (waiting + running)."""
        return len(self.waiting) + len(self.decoding) + len(self.prefilling)

    def has_work(self) -> bool:
        if self._dirty:
            self._purge()
        return bool(self.waiting or self.decoding or self.prefilling)

    def blocks_needed(self, req: SimRequest) -> int:
        out = 0 if req.handoff else req.output_tokens
        return -(-(req.prompt_tokens + out) // self.block_size) + self.seq_blocks

    def add(self, req: SimRequest) -> None:
        req.instance = self.index
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """Drop a request wherever it is, releasing its blocks."""
        if req.finished_at is not None or req.aborted:
            return
        req.aborted = True
        if req.admitted_at is None:
            if req in self.waiting:
                self.waiting.remove(req)
        else:  # leaves decoding/prefilling at the next purge (a planned step may hold it)
            self._release(req)
            self._dirty = True
        self.stats.finished["abort"] += 1

    def _purge(self) -> None:
        self.decoding = [r for r in self.decoding if not r.aborted]
        self.prefilling = [r for r in self.prefilling if not r.aborted]
        self._decode_ctx = sum(r.prompt_tokens + r.generated for r in self.decoding)
        self._dirty = False

    # ------------------------------------------------------------ step

    def _admit(self, req: SimRequest, now: float) -> bool:
        """Match the prefix in GPU, CPU and shared tiers and reserve blocks; False if full
        (``admission.admit``)."""
        return admit(self, req, now)

    def plan(self, now: float) -> float | None:
        """Choose the next step's work at ``now``; return its duration (None: nothing to do).

        As vLLM v1: running requests first (each decode 1 token, each unfinished prefill a
        chunk of what is left of the token budget), then waiting requests FCFS while budget,
        sequence slots and KV blocks last.
        """
        if self._dirty:
            self._purge()
        budget = self.preset.max_num_batched_tokens
        cost = self.cost
        dec = self.decoding
        if len(dec) <= budget:
            batch = dec  # self.decoding is replaced, never mutated, so no copy is needed
            ctx = self._decode_ctx
        else:
            batch = dec[:budget]
            ctx = sum(r.prompt_tokens + r.generated for r in batch)
        if not self.prefilling and not self.waiting:  # decode-only step (the common case)
            self._dec_batch = batch
            self._prefill_plan = _NOTHING
            if not batch:
                return None
            dur = cost.decode_step_s(len(batch), ctx)
            self.stats.steps += 1
            self.stats.busy_s += dur
            return dur
        flops = cost.decode_flops(len(batch), ctx)
        kv_read = float(ctx)
        plan: list[tuple[SimRequest, int]] = []
        flops, kv_read, load_s = self._prefills(now, budget - len(batch), flops, kv_read, plan)
        self._dec_batch = batch
        self._prefill_plan = plan
        if not batch and not plan:
            return None
        if cost.varies:  # the bytes read depend on the step's tokens and sequences
            tokens = len(batch) + sum(n for _, n in plan)
            dur = cost.step_s(flops, kv_read, tokens, len(batch) + len(plan)) + load_s
        else:
            dur = cost.step_s(flops, kv_read) + load_s
        self.stats.steps += 1
        self.stats.busy_s += dur
        return dur

    def _prefills(self, now: float, budget: int, flops: float, kv_read: float,
                  plan: list[tuple[SimRequest, int]]) -> tuple[float, float, float]:
        """A mixed step's prefill work after its decodes: a chunk of each prefilling
        request, then waiting requests admitted FCFS while budget, sequence slots and KV
        blocks last, each with its first chunk; (FLOPs, KV tokens, tier load seconds)."""
        p = self.preset
        load_s = 0.0
        budget, flops, kv_read = self._chunks(self.prefilling, budget, flops, kv_read, plan)
        waiting = self.waiting
        while waiting and budget > 0 \
                and len(self.decoding) + len(self.prefilling) < p.max_num_seqs:
            r = waiting[0]
            if r.arrival > now or not self._admit(r, now):
                break
            waiting.popleft()
            self.prefilling.append(r)
            if not r.kv_ready:  # a moved KV's tier loads were its prefill instance's
                r.load_s = own = tier_loads(self, r)
                load_s += own
            budget, flops, kv_read = self._chunks((r,), budget, flops, kv_read, plan)
        return flops, kv_read, load_s

    def _chunks(self, reqs: Sequence[SimRequest], budget: int, flops: float, kv_read: float,
                plan: list[tuple[SimRequest, int]]) -> tuple[int, float, float]:
        """Each of ``reqs``' next prefill chunk, in order, while budget lasts: appended to
        ``plan``, its cost added to ``flops`` and ``kv_read`` (in this order, as every step
        has summed them); the budget, FLOPs and KV tokens after them."""
        cost = self.cost
        for r in reqs:
            if budget <= 0:
                break
            n = min(r.prompt_tokens - r.computed, budget)
            plan.append((r, n))
            budget -= n
            flops += cost.prefill_flops(n, r.computed)
            kv_read += r.computed + n
        return budget, flops, kv_read

    def commit(self, now: float, stamp: int | None = None) -> list[SimRequest]:
        """Apply the planned step, ending at ``now``; return the requests that finished.
        A request that keeps token stamps (``token_ns``) gets ``stamp`` for its token, and
        its ``on_progress`` is called only when it finishes."""
        done: list[SimRequest] = []
        st = self.stats
        emitted = 0
        for r in self._dec_batch:
            if r.aborted:
                continue
            g = r.generated + 1
            r.generated = g
            emitted += 1
            fin = g >= r.output_tokens
            if fin:
                r.finished_at = now
                r.finish_reason = r.finish_as
                done.append(r)
            if r.token_ns is not None:
                r.token_ns.append(stamp)  # type: ignore[arg-type]
                if not fin:
                    continue
            if r.on_progress is not None:
                r.on_progress(r)
        self._decode_ctx += emitted
        n_dec_done = len(done)
        started: list[SimRequest] = []
        handed = self.handed
        plan = self._prefill_plan
        self._dec_batch = self._prefill_plan = _NOTHING
        for r, n in plan:
            if r.aborted:
                continue
            r.computed += n
            if r.computed < r.prompt_tokens:
                continue
            self._cache_prompt(r, now)
            if r.handoff:  # prefill only: its KV leaves for a decode instance
                self._release(r)
                handed.append(r)
                continue
            r.first_token_at = now
            st.ttft.observe((now - r.arrival) / self.speedup)
            r.generated = 1
            emitted += 1
            started.append(r)
            fin = r.output_tokens <= 1
            if fin:
                r.finished_at = now
                r.finish_reason = r.finish_as
                done.append(r)
            if r.token_ns is not None:
                r.token_ns.append(stamp)  # type: ignore[arg-type]
                if not fin:
                    continue
            if r.on_progress is not None:
                r.on_progress(r)
        st.generation_tokens += emitted
        if started or handed:  # their prefills are over
            ids = set(map(id, started)) | set(map(id, handed))
            self.prefilling = [r for r in self.prefilling if id(r) not in ids]
            new = [r for r in started if r.finished_at is None]
            if new:
                self.decoding = self.decoding + new
                self._decode_ctx += sum(r.prompt_tokens + 1 for r in new)
        if n_dec_done == 1:
            gone = done[0]
            self.decoding = [r for r in self.decoding if r is not gone]
            self._decode_ctx -= gone.prompt_tokens + gone.generated
        elif n_dec_done:
            ids = set(map(id, done[:n_dec_done]))
            self.decoding = [r for r in self.decoding if id(r) not in ids]
            self._decode_ctx -= sum(r.prompt_tokens + r.generated for r in done[:n_dec_done])
        for r in done:
            self._release(r)
            st.finished[r.finish_as] += 1
            st.e2e.observe((now - r.arrival) / self.speedup)
        return done

    def _cache_prompt(self, r: SimRequest, now: float) -> None:
        """Prefill done: the prompt's full blocks enter the GPU cache (and write-through tiers)."""
        hashes = r.hashes
        n_full = len(hashes)
        gpu, bs = self.gpu, self.block_size
        k0 = r.local_blocks
        gpu.reserved -= n_full - k0
        r.reserved -= n_full - k0
        if n_full:
            # inserted (or touched, when cached already) at ``now``: no touch left to do
            gpu.insert(hashes, n_full, now, pinned=k0)  # k0 > 0: hashes[k0 - 1] is pinned
            gpu.pin(hashes, n_full)
            if r.pinned is not None:
                gpu.unpin(r.pinned)
            r.pinned = hashes[n_full - 1]
            if r.session is not None:
                self._turn_ends[r.session] = n_full
            stored = self.stats.stored
            if self.cpu is not None:
                stored["cpu"] += self.cpu.insert(hashes, n_full, now, make_room=True) * bs
            if self.nvme is not None:
                stored["nvme"] += self.nvme.insert(hashes, n_full, now, make_room=True) * bs
            if self.shared is not None:
                stored["shared"] += self.shared.insert(hashes, n_full, now,
                                                       make_room=True) * bs

    def _release(self, r: SimRequest) -> None:
        self._releases += 1
        if r.pinned is not None:
            self.gpu.unpin(r.pinned)
            r.pinned = None
        self.gpu.reserved -= r.reserved
        r.reserved = 0

    # ------------------------------------------------------------ gauges

    def kv_usage(self) -> float:
        """Share of GPU blocks held by running requests (vLLM's kv_cache_usage_perc): the
        blocks they reserved and the cached blocks on their paths, which are those above
        their pinned blocks (``gpu.held``, counted as pins come and go)."""
        gpu = self.gpu
        return min(1.0, (gpu.held + gpu.reserved) / gpu.capacity)


_NOTHING: tuple[()] = ()  # no step planned

