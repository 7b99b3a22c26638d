"""A request inside the simulator and an instance's counters (``engine.py`` schedules
them)."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentbench.sim.histogram import E2E_BUCKETS, TTFT_BUCKETS, Histogram


@dataclass(eq=False, slots=True)
class SimRequest:
    """One request inside the simulator. Times are simulated seconds."""

    rid: int
    prompt_tokens: int
    hashes: Sequence[int]  # prefix-chained hashes of the prompt's full blocks (never mutated)
    output_tokens: int  # tokens it will generate (>= 1)
    match_limit: int = 0  # blocks a lookup may hit: one prompt token is always computed
    finish_as: str = "length"  # "length" (max_tokens reached) or "stop" (simulated EOS)
    session: str | None = None
    arrival: float = 0.0
    #: prefill only: at the prefill's end the request leaves this instance for a decode
    #: instance (P/D disaggregation, ``disagg.py``) instead of emitting its first token
    handoff: bool = False
    #: its prompt's KV was computed elsewhere and moved here: admitted with nothing to
    #: prefill (the decode side of P/D)
    kv_ready: bool = False
    # set by the engine
    instance: int = -1
    local_blocks: int = 0  # leading blocks found in this instance's GPU cache
    # where its time went (``timeline.breakdown``)
    sent_at: float = 0.0  # routed (its arrival before a fitted preset's request_s)
    load_s: float = 0.0  # its own tier loads, in the step that admitted it
    prefill_start: float | None = None  # P/D: admitted on its prefill instance
    prefill_end: float | None = None  # P/D: its prefill ended (it left for a decode one)
    cached_tokens: int = 0
    gpu_hit_tokens: int = 0
    cpu_hit_tokens: int = 0
    nvme_hit_tokens: int = 0
    shared_hit_tokens: int = 0
    computed: int = 0  # prompt tokens present (cached or prefilled) so far
    generated: int = 0
    reserved: int = 0
    pinned: int | None = None
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    aborted: bool = False
    #: called when it finishes or is aborted; and at each token it emits, unless its
    #: engine keeps its token stamps (``token_ns``)
    on_progress: Callable[[SimRequest], None] | None = field(default=None, repr=False)
    #: its token events, kept by the engine when a virtual-time driver (``TimerDriver``)
    #: steps it: each event's time (integer ns of the driver's clock), one token a step
    #: (an event's tokens are then all ones, which the receiver writes once at the end).
    #: Set by whoever submits it (the replay's in-process transport), None otherwise
    token_ns: array[int] | None = field(default=None, repr=False)


@dataclass
class InstanceStats:
    """Cumulative counters of one instance (what /metrics exposes)."""

    requests_admitted: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    hits_gpu: int = 0
    hits_cpu: int = 0
    hits_nvme: int = 0
    hits_shared: int = 0
    #: per tier (cpu, nvme, shared): seconds spent loading from it, tokens written to it
    load_s: dict[str, float] = field(default_factory=lambda: {"cpu": 0.0, "nvme": 0.0,
                                                              "shared": 0.0})
    stored: dict[str, int] = field(default_factory=lambda: {"cpu": 0, "nvme": 0,
                                                            "shared": 0})
    finished: dict[str, int] = field(default_factory=lambda: {"length": 0, "stop": 0,
                                                              "abort": 0})
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    steps: int = 0
    busy_s: float = 0.0
    #: P/D, on a decode instance: KV moved to it (tokens, bytes) and the seconds requests
    #: waited for it (``disagg.py``)
    kv_in_tokens: int = 0
    kv_in_bytes: float = 0.0
    kv_in_wait_s: float = 0.0
