"""Admission to an instance (``engine.Instance``): a waiting request's prefix matched in
the GPU, CPU, NVMe and shared tiers and its KV blocks reserved, or not when they cannot be
made free (``admit``); the seconds its loads from the slower tiers add to its first step
(``tier_loads``); and whether it can fit on the instance at all (``first_fit_error``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbench.sim.request import SimRequest

if TYPE_CHECKING:
    from agentbench.sim.engine import Instance


def admit(inst: Instance, req: SimRequest, now: float) -> bool:
    """Match the prefix in GPU, CPU and shared tiers and reserve blocks; False if full."""
    blocked = inst._blocked
    if blocked is not None and blocked[0] is req and blocked[1] == inst._releases:
        return False  # nothing gave blocks back since it last failed: it still cannot fit
    hashes, limit, session = req.hashes, req.match_limit, req.session
    gpu = inst.gpu
    hint = inst._turn_ends.get(session, 0) if session is not None else 0
    k = gpu.match(hashes, limit, hint)
    if k:
        gpu.pin(hashes, k)
    need = inst.blocks_needed(req) - k
    # as vLLM, evict only when that makes room: free + evictable blocks, where the blocks
    # on a running request's (or this one's) cached path, those above a pinned block
    # (``gpu.held``), cannot be evicted
    if gpu.free < need and (gpu.capacity - gpu.reserved - gpu.held < need
                            or not gpu.make_free(need)):
        if k:
            gpu.unpin(hashes[k - 1])
        inst._blocked = (req, inst._releases)
        return False
    inst._blocked = None
    gpu.reserved += need
    req.reserved = need
    bs = inst.block_size
    st = inst.stats
    if k:
        req.pinned = hashes[k - 1]
        gpu.touch(hashes, k, now)
    else:
        req.pinned = None
    req.local_blocks = k
    if req.kv_ready:  # prefilled elsewhere: its hits were counted there
        req.computed = req.prompt_tokens
        req.admitted_at = now
        st.requests_admitted += 1
        return True
    cpu, shared, nvme = inst.cpu, inst.shared, inst.nvme
    if cpu is None and shared is None and nvme is None:
        req.gpu_hit_tokens = req.cached_tokens = req.computed = cached = k * bs
        st.hits_gpu += cached
    else:
        kc = cpu.match(hashes, limit, hint) if cpu is not None else 0
        kn = nvme.match(hashes, limit, hint) if nvme is not None else 0
        ks = shared.match(hashes, limit, hint) if shared is not None else 0
        cpu_blocks = max(0, kc - k)
        nvme_blocks = max(0, kn - max(k, kc))  # each tier loads what the faster lack
        shared_blocks = max(0, ks - max(k, kc, kn))
        if kc and cpu is not None:
            cpu.touch(hashes, kc, now)
        if kn and nvme is not None:
            nvme.touch(hashes, kn, now)
        if ks and shared is not None:
            shared.touch(hashes, ks, now)
        req.gpu_hit_tokens = k * bs
        req.cpu_hit_tokens = cpu_blocks * bs
        req.nvme_hit_tokens = nvme_blocks * bs
        req.shared_hit_tokens = shared_blocks * bs
        req.cached_tokens = req.computed = cached = \
            (k + cpu_blocks + nvme_blocks + shared_blocks) * bs
        st.hits_gpu += req.gpu_hit_tokens
        st.hits_cpu += req.cpu_hit_tokens
        st.hits_nvme += req.nvme_hit_tokens
        st.hits_shared += req.shared_hit_tokens
    req.admitted_at = now
    st.requests_admitted += 1
    st.prompt_tokens += req.prompt_tokens
    st.prefix_queries += req.prompt_tokens
    st.prefix_hits += cached
    return True


def tier_loads(inst: Instance, r: SimRequest) -> float:
    """Seconds ``r``'s loads from the CPU, NVMe and shared tiers take (each tier's
    per-token time, plus its latency when it loads anything), each tier's part
    counted in ``stats.load_s``."""
    cpu_s = r.cpu_hit_tokens * inst.preset.cpu_load_s_per_token
    shared_s = r.shared_hit_tokens * inst.shared_load
    own = cpu_s + shared_s
    nvme_s = 0.0
    if r.nvme_hit_tokens:
        nvme_s = r.nvme_hit_tokens * inst.nvme_load + inst.nvme_latency
        own += nvme_s
    if inst.cpu_latency and r.cpu_hit_tokens:
        own += inst.cpu_latency
    if inst.shared_latency and r.shared_hit_tokens:
        own += inst.shared_latency
    if own:
        ls = inst.stats.load_s
        ls["cpu"] += cpu_s + (inst.cpu_latency if r.cpu_hit_tokens else 0.0)
        ls["shared"] += shared_s + (inst.shared_latency if r.shared_hit_tokens else 0.0)
        ls["nvme"] += nvme_s
    return own


def first_fit_error(inst: Instance, req: SimRequest, what: str = "an instance"
                    ) -> str | None:
    """Why ``req`` can never run on ``inst`` (None when it can); ``what`` names the
    instance in the message."""
    need = inst.blocks_needed(req)
    if need > inst.gpu.capacity:
        out = 0 if req.handoff else req.output_tokens
        seq = inst.seq_blocks
        fixed = f", {seq:,} for the preset's sequence_kv_bytes" if seq else ""
        return (f"This request needs {need:,} KV blocks ({req.prompt_tokens:,} prompt + "
                f"{out:,} output tokens{fixed}) but {what} holds "
                f"{inst.gpu.capacity:,} blocks of {inst.block_size} tokens.")
    return None
