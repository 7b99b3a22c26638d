"""Timing presets of the serving simulator: one instance's hardware, model and engine
settings, each figure with where it came from.

The shipped presets are data: ``preset_files/NAME.yaml`` beside this module, read by
``presetfile.load_preset_file`` (the format: docs/engines.md, "Simulator presets"). A
scenario's simulated endpoint names one of them or the path of a preset file of its own
(``get_preset``). How the figures turn into step times: ``cost.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentbench.scenario.model import is_preset_path
from agentbench.sim.cost import StepFit, seconds_per_byte, seconds_per_flop, step_cost

#: folder of the shipped preset files
PRESET_DIR = Path(__file__).resolve().parent / "preset_files"
#: the shipped presets, in the order ``serve-sim --list-presets`` shows them
BUILTIN = ("h200-llama3-70b", "h100-llama3-8b", "h200x8-deepseek-v3", "gb200x8-deepseek-v3",
           "h200-gpt-oss-120b", "gb200-gpt-oss-120b", "instant",
           "h200-gpt-oss-120b-all-full")  # a counterfactual (scenarios/hybrid-attention.yaml)
#: the figures of a preset (its numeric fields), in file order
FIGURES = ("params", "layers", "hidden", "kv_bytes_per_token", "weight_bytes", "peak_flops",
           "mfu", "hbm_bytes_per_s", "mbu", "hbm_bytes", "gpu_memory_utilization",
           "activation_reserve_bytes", "step_overhead_s", "max_num_batched_tokens",
           "max_num_seqs", "cpu_load_s_per_token", "shared_load_s_per_token",
           "natural_output_tokens", "kv_capacity_tokens", "expert_weight_bytes",
           "routed_experts", "experts_per_token", "sequence_kv_bytes",
           "max_context_tokens", "ram_cache_tokens")
#: the figures a roofline preset may leave out: the engine-reported capacity, a mixture
#: of experts' and a hybrid-attention model's, the engine's context window
OPTIONAL = ("kv_capacity_tokens", "expert_weight_bytes", "routed_experts",
            "experts_per_token", "sequence_kv_bytes", "max_context_tokens",
            "ram_cache_tokens")
#: the figures only the roofline reads: a fitted preset (``step_fit``) has none of them
ROOFLINE_ONLY = ("params", "layers", "hidden", "kv_bytes_per_token", "weight_bytes",
                 "peak_flops", "mfu", "hbm_bytes_per_s", "mbu", "hbm_bytes",
                 "gpu_memory_utilization", "activation_reserve_bytes", "step_overhead_s")
#: how an instance schedules: vLLM-style paged blocks with prefix caching and chunked
#: prefill, or llama.cpp-style slots each keeping its own prompt's cache
SCHEDULERS = ("paged", "slots")


@dataclass(frozen=True)
class Provenance:
    """Where a preset's figures come from: the engine, model and hardware they describe,
    when they were set, the documents or runs behind them, and each figure's own source
    (``figures``: (figure, source) pairs such as a spec sheet, "assumption" or "fitted
    from RUNS")."""

    engine: str = ""
    engine_version: str | None = None
    model: str = ""
    hardware: str = ""
    date: str = ""
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    figures: tuple[tuple[str, str], ...] = ()

    def source_of(self, figure: str) -> str:
        """Where ``figure``'s value comes from ("" when not recorded)."""
        return dict(self.figures).get(figure, "")

    def lines(self) -> list[str]:
        """The provenance as ``describe`` prints it."""
        version = f" {self.engine_version}" if self.engine_version else ""
        date = f" (figures of {self.date})" if self.date else ""
        out = [f"  engine: {self.engine}{version}{date}"] if self.engine else []
        if self.model or self.hardware:
            out.append(f"  model: {self.model or '?'} on {self.hardware or '?'}")
        out += [f"  source: {s}" for s in self.sources]
        return out + [f"  - {n}" for n in self.notes]


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
    mfu: float  # achieved fraction of peak_flops
    hbm_bytes_per_s: float
    mbu: float  # achieved fraction of HBM bandwidth
    hbm_bytes: float
    gpu_memory_utilization: float
    activation_reserve_bytes: float
    step_overhead_s: float
    max_num_batched_tokens: int
    max_num_seqs: int
    cpu_load_s_per_token: float  # CPU offload tier -> GPU, per token
    shared_load_s_per_token: float  # shared tier (RDMA) -> GPU, per token
    natural_output_tokens: int  # mean output length when the client does not force one
    provenance: Provenance = field(default_factory=Provenance)
    #: KV capacity in tokens as the engine reports it (None: from the memory figures)
    kv_capacity_tokens: int | None = None
    #: step times from this fit instead of the roofline (a preset fitted to an engine)
    step_fit: StepFit | None = None
    scheduler: str = "paged"  # one of SCHEDULERS
    #: GPUs one instance runs on (0: none, a CPU engine or a synthetic preset; None: the
    #: preset does not say), for the check of ``hardware.gpus`` (``modeled_gpus``)
    gpus: int | None = None
    #: how the fit was made and its residuals (a preset file's step_model.fit)
    fit_summary: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    #: a mixture-of-experts model: bytes of its routed experts (part of weight_bytes), the
    #: experts per MoE layer and the experts each token uses; a step reads the experts its
    #: tokens route to (cost.py); 0: a dense model, every weight read once per step
    expert_weight_bytes: float = 0.0
    routed_experts: int = 0
    experts_per_token: int = 0
    #: KV bytes a sequence holds whatever its length (sliding-window layers at their
    #: window, linear-attention or state-space layers' state): reserved per running
    #: request and read at each of its decode steps; 0: every layer is full attention
    sequence_kv_bytes: float = 0.0
    #: the context window the engine enforces per request, in the simulator's tokens (a
    #: longer request is refused with HTTP 400, as the engine refuses it: vLLM's
    #: --max-model-len, a llama.cpp slot's share of -c); None: only the KV capacity limits
    #: a request. A simulated endpoint's own max_context_tokens takes precedence.
    max_context_tokens: int | None = None
    #: a slots (llama.cpp) engine's host-RAM prompt cache, in the simulator's tokens
    #: (``--cache-ram``); 0: none (``--cache-ram 0``); None: llama-server's default
    #: (``slots.ram_default``)
    ram_cache_tokens: int | None = None

    @property
    def s_per_flop(self) -> float:
        return seconds_per_flop(self.peak_flops, self.mfu)

    @property
    def s_per_byte(self) -> float:
        return seconds_per_byte(self.hbm_bytes_per_s, self.mbu)

    def cache_tokens(self) -> int:
        """KV capacity in tokens: as the engine reported it, else (HBM x utilization -
        weights - activations) / KV bytes."""
        if self.kv_capacity_tokens is not None:
            return self.kv_capacity_tokens
        free = self.hbm_bytes * self.gpu_memory_utilization - self.weight_bytes \
            - self.activation_reserve_bytes
        return max(0, int(free // self.kv_bytes_per_token))

    def model_kv_bytes(self, setting: str) -> float:
        """The model's KV bytes per token; a fitted preset records no model shape (0):
        a ``ValueError`` naming ``setting``, the scenario key that must say instead."""
        kvb = self.kv_bytes_per_token
        if not kvb or kvb != kvb:  # 0, or NaN
            raise ValueError(f"preset {self.name} gives no KV bytes per token: set {setting}")
        return float(kvb)

    def cache_blocks(self, block_size: int) -> int:
        """KV capacity in blocks of ``block_size`` tokens."""
        return max(1, self.cache_tokens() // block_size)

    def describe(self) -> str:
        """Name, summary, the speeds the figures imply and their provenance."""
        lines = [f"{self.name}: {self.summary}"]
        if self.step_fit is not None:
            lines.append(f"  fitted step model, {self.scheduler} scheduler; KV capacity "
                         f"{self.cache_tokens():,} tokens; prefill ~"
                         f"{self.prefill_tokens_per_s(0, 512):,.0f} tok/s cold (512-token "
                         f"chunks); single-stream decode ~"
                         f"{1 / self.decode_step_s(1, 2_000):,.1f} tok/s at 2K context")
        elif self.peak_flops != math.inf:
            lines.append(f"  KV capacity {self.cache_tokens():,} tokens; prefill ~"
                         f"{self.prefill_tokens_per_s(0):,.0f} tok/s cold; single-stream "
                         f"decode ~{1 / self.decode_step_s(1, 8_000):,.0f} tok/s at 8K context")
        return "\n".join(lines + self.provenance.lines())

    def prefill_tokens_per_s(self, context: int, chunk: int = 8192) -> float:
        """Throughput of one prefill chunk at ``context`` tokens already present."""
        return step_cost(self).prefill_tokens_per_s(context, chunk)

    def decode_step_s(self, batch: int, context: int) -> float:
        """One decode step of ``batch`` sequences of ``context`` tokens each."""
        return step_cost(self).decode_step_s(batch, batch * context)


def _builtin() -> dict[str, Preset]:
    from agentbench.sim.presetfile import load_preset_file

    return {name: load_preset_file(PRESET_DIR / f"{name}.yaml") for name in BUILTIN}


PRESETS: dict[str, Preset] = _builtin()


def get_preset(name: str, **overrides: object) -> Preset:
    """The shipped preset ``name``, or the preset in the file at path ``name`` (relative to
    the working folder; scenario loading makes a scenario's relative to its folder), with
    ``overrides`` (field=value, None ignored) applied and recorded as their source."""
    if name in PRESETS:
        base = PRESETS[name]
    elif is_preset_path(name):
        from agentbench.sim.presetfile import load_preset_file

        base = load_preset_file(name)
    else:
        raise KeyError(f"unknown simulator preset {name!r}; known: "
                       f"{', '.join(sorted(PRESETS))}, or the path of a preset .yaml file")
    changes = {k: v for k, v in overrides.items() if v is not None}
    if not changes:
        return base
    prov = base.provenance
    figures = tuple((k, f"set by the endpoint's {k}" if k in changes else src)
                    for k, src in prov.figures)
    changes["provenance"] = replace(prov, figures=figures)
    return replace(base, **changes)  # type: ignore[arg-type]


def modeled_gpus(cfg: Any) -> int | None:
    """The GPUs a simulated endpoint models: over its groups of instances (its P/D pools,
    or all of them), instances x the preset's GPUs per instance; None when a preset does
    not say."""
    total = 0
    for _, _, ref, n in cfg.pools():
        gpus = get_preset(str(ref)).gpus
        if gpus is None:
            return None
        total += gpus * n
    return total

