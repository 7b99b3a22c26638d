"""Timing presets of the serving simulator: one instance's hardware and model, with the
provenance of every figure written beside it.

Step time follows a roofline: a step that runs ``P`` prefill and ``D`` decode tokens costs

    compute_s = (P + D) * 2 * params * s_per_flop  +  attention_flops * s_per_flop
    memory_s  = (weight_bytes + kv_bytes_read) * s_per_byte
    step_s    = max(compute_s, memory_s) + step_overhead_s (+ tier loads of admitted requests)

where ``attention_flops`` is ``4 * layers * hidden`` per (query token, context token) pair,
so a prefill chunk of ``n`` tokens starting at position ``p`` (``p`` = tokens already
cached or computed) costs ``n * (p + n / 2)`` pairs: every cached token is paid for again
by attention, but far cheaper than recomputing it. Decode reads the weights once per step
plus every running sequence's KV, so TPOT grows with batch size and context.
``s_per_flop = 1 / (peak_flops * mfu)``; ``s_per_byte = 1 / (hbm_bytes_per_s * mbu)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Preset:
    """One simulated inference instance (GPU(s) + model + engine settings)."""

    name: str
    summary: str
    params: float  # model parameters (linear-layer FLOPs per token = 2 * params)
    layers: int
    hidden: int  # num_attention_heads * head_dim (attention FLOPs per token pair / 4 / layers)
    kv_bytes_per_token: float
    weight_bytes: float
    peak_flops: float  # dense FLOP/s of the instance at the serving precision
    mfu: float  # achieved fraction of peak_flops (assumption, calibrated below)
    hbm_bytes_per_s: float
    mbu: float  # achieved fraction of HBM bandwidth (assumption)
    hbm_bytes: float
    gpu_memory_utilization: float
    activation_reserve_bytes: float
    step_overhead_s: float
    max_num_batched_tokens: int
    max_num_seqs: int
    cpu_load_s_per_token: float  # CPU offload tier -> GPU, per token
    shared_load_s_per_token: float  # shared tier (RDMA) -> GPU, per token
    natural_output_tokens: int  # mean output length when the client does not force one
    provenance: tuple[str, ...] = field(default=())

    @property
    def s_per_flop(self) -> float:
        return 0.0 if self.peak_flops == math.inf else 1.0 / (self.peak_flops * self.mfu)

    @property
    def s_per_byte(self) -> float:
        return 0.0 if self.hbm_bytes_per_s == math.inf else 1.0 / (self.hbm_bytes_per_s * self.mbu)

    def cache_tokens(self) -> int:
        """KV capacity in tokens: (HBM x utilization - weights - activations) / KV bytes."""
        free = self.hbm_bytes * self.gpu_memory_utilization - self.weight_bytes \
            - self.activation_reserve_bytes
        return max(0, int(free // self.kv_bytes_per_token))

    def cache_blocks(self, block_size: int) -> int:
        """KV capacity in blocks of ``block_size`` tokens."""
        return max(1, self.cache_tokens() // block_size)

    def describe(self) -> str:
        lines = [f"{self.name}: {self.summary}"]
        if self.peak_flops != math.inf:
            lines.append(f"  KV capacity {self.cache_tokens():,} tokens; prefill ~"
                         f"{self.prefill_tokens_per_s(0):,.0f} tok/s cold; single-stream "
                         f"decode ~{1 / self.decode_step_s(1, 8_000):,.0f} tok/s at 8K context")
        lines += [f"  - {p}" for p in self.provenance]
        return "\n".join(lines)

    def prefill_tokens_per_s(self, context: int, chunk: int = 8192) -> float:
        """Throughput of one prefill chunk at ``context`` tokens already present."""
        flops = chunk * 2 * self.params + chunk * (context + chunk / 2) * 4 * self.layers \
            * self.hidden
        t = max(flops * self.s_per_flop, self.weight_bytes * self.s_per_byte) \
            + self.step_overhead_s
        return chunk / t if t > 0 else math.inf

    def decode_step_s(self, batch: int, context: int) -> float:
        """One decode step of ``batch`` sequences of ``context`` tokens each."""
        flops = batch * (2 * self.params + context * 4 * self.layers * self.hidden)
        mem = self.weight_bytes + batch * context * self.kv_bytes_per_token
        return max(flops * self.s_per_flop, mem * self.s_per_byte) + self.step_overhead_s


_H200_HBM = 141e9  # NVIDIA H200 SXM: 141 GB HBM3e, 4.8 TB/s (NVIDIA H200 product page)
_H200_BW = 4.8e12
_HOPPER_FP8 = 1979e12  # H100/H200 SXM dense FP8 Tensor Core peak (3,958 TFLOPS is with sparsity)
_H100_HBM = 80e9  # NVIDIA H100 SXM: 80 GB HBM3, 3.35 TB/s
_H100_BW = 3.35e12

#: Llama-3-70B architecture (config.json of meta-llama/Meta-Llama-3-70B): 80 layers, hidden
#: 8192, 64 query heads, 8 KV heads of dim 128 -> KV per token = 2 (K,V) x 80 x 8 x 128
#: values; FP8 KV cache = 163,840 bytes/token.
_LLAMA70_KV_FP8 = 2 * 80 * 8 * 128 * 1
#: Llama-3.1-8B: 32 layers, hidden 4096, 8 KV heads of dim 128 -> 65,536 bytes/token FP8.
_LLAMA8_KV_FP8 = 2 * 32 * 8 * 128 * 1

PRESETS: dict[str, Preset] = {
    "h200-llama3-70b": Preset(
        name="h200-llama3-70b",
        summary="one H200 SXM running Llama-3.x-70B in FP8 (weights and KV), vLLM-like "
                "engine (chunked prefill, 8,192-token step budget)",
        params=70.6e9, layers=80, hidden=8192,
        kv_bytes_per_token=_LLAMA70_KV_FP8, weight_bytes=70.6e9,
        peak_flops=_HOPPER_FP8, mfu=0.55,
        hbm_bytes_per_s=_H200_BW, mbu=0.75,
        hbm_bytes=_H200_HBM, gpu_memory_utilization=0.9, activation_reserve_bytes=5e9,
        step_overhead_s=0.002,
        max_num_batched_tokens=8192, max_num_seqs=256,
        cpu_load_s_per_token=_LLAMA70_KV_FP8 / 50e9,
        shared_load_s_per_token=_LLAMA70_KV_FP8 / 25e9,
        natural_output_tokens=300,
        provenance=(
            "Hardware: NVIDIA H200 SXM datasheet figures (141 GB HBM3e, 4.8 TB/s, 1,979 "
            "dense FP8 TFLOPS).",
            "Model shape: Llama-3-70B config.json (80 layers, hidden 8192, 8 KV heads x 128); "
            "FP8 weights 70.6 GB, FP8 KV 160 KiB/token.",
            "Calibration: TensorRT-LLM perf-overview (docs/source/performance/"
            "perf-overview.md, Llama 3.3 70B FP8, H200 TP1) reports 442 output tok/s at "
            "ISL/OSL 2048/128, i.e. ~7,000 prefill tok/s; mfu 0.55 gives ~7,150 tok/s here. "
            "It reports 4,336 tok/s at 128/2048 (decode-bound); mbu 0.75 lands within ~25%.",
            "Assumptions (not measured): 5 GB activation/CUDA-graph reserve, 2 ms per-step "
            "scheduling overhead, gpu_memory_utilization 0.9 (vLLM default).",
            "Tier loads (assumptions): CPU offload over PCIe Gen5 at 50 GB/s effective "
            "(3.3 us/token); shared tier over one 200 Gb/s RDMA NIC at 25 GB/s (6.6 us/token).",
            "Context length is not capped by the model's 128K: a request is refused only when "
            "its prompt plus max_tokens cannot fit the instance's KV cache.",
        ),
    ),
    "h100-llama3-8b": Preset(
        name="h100-llama3-8b",
        summary="one H100 SXM running Llama-3.1-8B in FP8, vLLM-like engine",
        params=8.03e9, layers=32, hidden=4096,
        kv_bytes_per_token=_LLAMA8_KV_FP8, weight_bytes=8.03e9,
        peak_flops=_HOPPER_FP8, mfu=0.45,
        hbm_bytes_per_s=_H100_BW, mbu=0.7,
        hbm_bytes=_H100_HBM, gpu_memory_utilization=0.9, activation_reserve_bytes=3e9,
        step_overhead_s=0.002,
        max_num_batched_tokens=8192, max_num_seqs=256,
        cpu_load_s_per_token=_LLAMA8_KV_FP8 / 50e9,
        shared_load_s_per_token=_LLAMA8_KV_FP8 / 25e9,
        natural_output_tokens=300,
        provenance=(
            "Hardware: NVIDIA H100 SXM datasheet (80 GB HBM3, 3.35 TB/s, 1,979 dense FP8 "
            "TFLOPS).",
            "Model shape: Llama-3.1-8B config.json (32 layers, hidden 4096, 8 KV heads x 128).",
            "Calibration: TensorRT-LLM perf-overview (Llama 3.1 8B FP8, H100 TP1) reports "
            "3,450 output tok/s at ISL/OSL 2048/128, i.e. ~55,000 prefill tok/s; mfu 0.45 "
            "gives ~48,000 tok/s here (within 15%).",
            "Assumptions: 3 GB activation reserve, 2 ms step overhead, tier bandwidths as in "
            "h200-llama3-70b.",
        ),
    ),
    "instant": Preset(
        name="instant",
        summary="zero-cost steps: the cache and router are simulated, time is not (client "
                "benchmarks, tests)",
        params=1e9, layers=1, hidden=1, kv_bytes_per_token=1.0, weight_bytes=0.0,
        peak_flops=math.inf, mfu=1.0, hbm_bytes_per_s=math.inf, mbu=1.0,
        hbm_bytes=4e6, gpu_memory_utilization=1.0, activation_reserve_bytes=0.0,
        step_overhead_s=0.0, max_num_batched_tokens=1 << 20, max_num_seqs=1024,
        cpu_load_s_per_token=0.0, shared_load_s_per_token=0.0, natural_output_tokens=64,
        provenance=("Synthetic: 4M-token cache, every duration zero.",),
    ),
}


def get_preset(name: str, **overrides: object) -> Preset:
    """The named preset, with ``overrides`` (field=value, None ignored) applied."""
    try:
        base = PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown simulator preset {name!r}; known: "
                       f"{', '.join(sorted(PRESETS))}") from None
    changes = {k: v for k, v in overrides.items() if v is not None}
    return replace(base, **changes) if changes else base  # type: ignore[arg-type]
