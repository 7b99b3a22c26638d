"""The scenario: everything a run needs, validated (pydantic v2, ``extra="forbid"``).

A typo in a scenario is an error with the key's path, never ignored. Every field has a
description; ``agentbench validate`` prints every problem at once.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from agentbench.scenario.endpoints import (  # noqa: F401 - the model's names, re-exported
    Endpoint,
    OpenAIEndpoint,
    Retry,
    Server,
    SharedTier,
    SimulatedEndpoint,
    is_preset_path,
)
from agentbench.scenario.pricing import (  # noqa: F401 - re-exported
    MAX_PRICE_USD,
    MIN_GPUS,
    ApiCache,
    ApiCacheHitRate,
    Hardware,
    Prices,
)
from agentbench.scenario.strict import (  # noqa: F401 - re-exported
    INT64,
    PrintableLine,
    Strict,
    json_only,
)
from agentbench.scenario.tracespec import (  # noqa: F401 - re-exported
    SynthSource,
    TraceFilters,
    TraceSource,
    TraceSpec,
    TraceTransform,
)

#: the most lanes (or arrivals in flight) a scenario may ask for: each lane holds a session
#: tree's state in memory, and a typo (1e8) should be an error, not a MemoryError later
MAX_LANES = 100_000
#: the largest ``timing.time_scale`` (also checked where a run.json is read:
#: ``agentbench.results.runshape``)
MAX_TIME_SCALE = 1e6


# ---------------------------------------------------------------- load and timing


class LanesLoad(Strict):
    """Closed loop: N lanes each replay one session tree at a time."""

    kind: Literal["lanes"] = Field(description="Closed loop of concurrent agent lanes.")
    concurrency: int | list[int] = Field(
        description="Lanes; a list runs a sweep, one stage per value.")

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: int | list[int]) -> int | list[int]:
        vals = v if isinstance(v, list) else [v]
        if not vals or any(x <= 0 for x in vals):
            raise ValueError("concurrency values must be positive integers")
        if any(x > MAX_LANES for x in vals):
            raise ValueError(f"concurrency values must be at most {MAX_LANES:,}")
        return v


#: the slowest open-loop rate, session trees per second (1e-300 overflowed the arrival
#: times; far below this a run is simulated idle time, or waits in vain on the wall clock)
MIN_RATE_PER_S = 1e-6


class RateLoad(Strict):
    """Open loop: new session trees arrive at a rate or at the trace's own times."""

    kind: Literal["rate"] = Field(description="Open loop of arriving agent sessions.")
    arrival: Literal["poisson", "constant", "trace"] = Field(
        "poisson", description="Inter-arrival process; 'trace' uses recorded start times.")
    rate_per_s: float | list[float] | None = Field(
        None, description="Session trees per second; a list runs a sweep. Not for 'trace'.")
    max_concurrency: int | None = Field(None, gt=0,
                                        description="Cap on trees in flight (None: none).")

    @model_validator(mode="after")
    def _rate(self) -> RateLoad:
        if self.arrival == "trace":
            if self.rate_per_s is not None:  # it was dropped without a word
                raise ValueError("rate_per_s is not for arrival: trace (trees start at the "
                                 "trace's own times); drop it, or choose poisson or constant")
            return self
        vals = self.rate_per_s if isinstance(self.rate_per_s, list) else [self.rate_per_s]
        if not vals or any(v is None or v <= 0 for v in vals):
            raise ValueError("rate_per_s must be given and positive for poisson/constant")
        if any(v < MIN_RATE_PER_S for v in vals if v is not None):
            raise ValueError(f"rate_per_s must be at least {MIN_RATE_PER_S:g} session trees "
                             "per second (one every 11.6 days)")
        return self


Load = Annotated[LanesLoad | RateLoad, Field(discriminator="kind")]


class Timing(Strict):
    """When each turn is sent."""

    strategy: Literal["think-only", "original", "api-scaled"] = Field(
        "think-only", description="think-only: think time after the previous response; "
        "original: recorded start-to-start; api-scaled: recorded api time x api_scale + think.")
    time_scale: float = Field(1.0, ge=0, le=MAX_TIME_SCALE,
                              description="Multiply every waiting time by this (at most 1e6).")
    api_scale: float = Field(1.0, ge=0, le=1e6, description="Factor on recorded api time "
                             "(api-scaled; at most 1e6).")
    idle_cap_s: float | None = Field(
        10.0, ge=0, description="When nothing is in flight, pull pending timers in to at most "
        "this far away; None: no cap. Default: 10 s on the wall clock, no cap in virtual time "
        "(idle simulated time costs nothing there), unless set.")

    def idle_cap_for(self, clock: str) -> float | None:
        """The idle cap in force on ``clock`` (see ``idle_cap_s``)."""
        if clock == "virtual" and "idle_cap_s" not in self.model_fields_set:
            return None
        return self.idle_cap_s


class Warmup(Strict):
    """Warm the server before measuring."""

    enabled: bool = Field(False, description="Send a warmup request per lane first.")
    random_start: bool = Field(
        True, description="Start each lane at a random turn of its first tree, sending that "
        "turn's full prefix as warmup (AgentX style).")
    start_min_ratio: float = Field(
        0.0, ge=0, le=1, description="random_start: the earliest start turn t*, as a share of "
        "the root's turns.")
    start_by: Literal["turn", "time"] = Field(
        "turn", description="random_start: draw t* over the root's turns (turn) or over its "
        "recorded time (time: the last turn sent at or before the drawn instant, as AIPerf "
        "0.13.0 does).")
    start_max_ratio: float = Field(
        1.0, ge=0, le=1, description="random_start: the latest start turn t*, as a share of "
        "the root's turns (the draw is uniform between the two).")
    requests_per_lane: int = Field(
        1, ge=1, le=10_000, description="Requests each lane sends as warmup (from its start "
        "turn on, subagents included) before its requests count as measured.")
    every_stage: bool = Field(
        False, description="Warm up at the start of every sweep stage, not only the first.")
    max_s: float | None = Field(
        None, gt=0, description="Closed loop: limits.duration_s counts from the moment every "
        "lane is warm; at most this long after the stage start (default: duration_s) it "
        "starts anyway.")

    @model_validator(mode="after")
    def _ratios(self) -> Warmup:
        if self.start_min_ratio > self.start_max_ratio:
            raise ValueError("start_min_ratio must not be above start_max_ratio")
        return self


class Limits(Strict):
    """When the run (or each sweep stage) stops."""

    duration_s: float | None = Field(None, gt=0, description="Wall-clock bound per stage.")
    max_sessions: int | None = Field(None, gt=0,
                                     description="Session trees to complete per stage.")
    max_requests: int | None = Field(None, gt=0, description="Requests to send per stage.")
    on_deadline: Literal["finish", "cancel"] = Field(
        "finish", description="At the deadline, let in-flight requests finish or cancel them "
        "(recorded either way).")
    recycle: bool = Field(
        True, description="When the trace runs out before the bound, replay copies of it with "
        "a per-copy cache-bust salt.")


class Prompt(Strict):
    """How prompts are synthesized from hash ids."""

    shared_prefix_tokens: int = Field(
        0, ge=0, le=10_000_000,
        description="Opt-in system/tool prefix shared by all sessions (tokens).")
    tokenizer: str | None = Field(
        None, description="tokenizer.json path or HF id for exact counts; None: approximate.")


class SLOs(Strict):
    """Service-level objectives a request (and an agent) must meet to count as goodput."""

    ttft_ms: float | None = Field(None, gt=0, description="Max TTFT per request, ms.")
    tpot_ms: float | None = Field(None, gt=0, description="Max TPOT per request, ms.")
    e2e_ms: float | None = Field(None, gt=0, description="Max end-to-end latency, ms.")
    agent_makespan_s: float | None = Field(None, gt=0,
                                           description="Max makespan per session tree, s.")
    agent_good_share: float | None = Field(
        None, gt=0, le=1, description="Share of an agent's requests (its subagents' too) "
        "that must meet the request SLOs for the agent to be good; None: every request.")


#: the shortest ``server_metrics.interval_s`` (a run sampled every 1 ms once wrote a 31 GB
#: spool before its disk was full)
MIN_SCRAPE_INTERVAL_S = 0.1


class ServerMetrics(Strict):
    """Scraping the endpoints' Prometheus /metrics during the run."""

    enabled: bool = Field(True, description="Scrape when the endpoint exposes /metrics.")
    interval_s: float = Field(1.0, ge=MIN_SCRAPE_INTERVAL_S, description=(
        "Seconds between scrapes, at least 0.1 (more often measures the scrape, and each "
        "sample is a row per series: a simulated instance has about 60). Default: 1 s on "
        "the wall clock, 10 simulated s in virtual time (samples cost CPU there, not "
        "time), unless set."))

    def interval_for(self, clock: str) -> float:
        """The interval in force on ``clock`` (see ``interval_s``)."""
        if clock == "virtual" and "interval_s" not in self.model_fields_set:
            return 10.0
        return self.interval_s


class FailOn(Strict):
    """When ``agentbench run`` exits 1: the run measured no successful request (always), or
    more than this share of its measured requests failed."""

    error_rate: float | None = Field(
        None, ge=0, le=1, description="Exit 1 when the measured error rate exceeds this "
        "(0-1); None: only when no measured request succeeded.")


class Output(Strict):
    """Where results go."""

    dir: PrintableLine = Field("results", min_length=1, description="Parent folder of run "
                               "folders (one printable line: it is printed as the results "
                               "line; '.' for the working folder).")
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.=+-]{0,199}$",
                               description="Run folder name (a plain name: letters, digits, "
                               "_ . = + -; no path); None: name + timestamp.")


class Variant(Strict):
    """One arm of a what-if experiment: the base scenario with some keys changed."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Variant label; its run is named <scenario>-<variant>.")
    description: str | None = Field(None, description="Free text for reports.")
    set: dict[str, Any] = Field(
        default_factory=dict,
        description="Dotted key paths to override, e.g. 'endpoints.0.router: round_robin'.")


class Scenario(Strict):
    """One agentbench run (or, with ``variants``, one run per variant)."""

    name: PrintableLine = Field(
        description="Scenario name; appears in run ids and reports (one printable line).")
    description: str | None = Field(None, description="Free text for reports.")
    seed: int = Field(0, ge=0, description="Seed for every random choice (0 is a seed).")
    endpoints: list[Endpoint] = Field(min_length=1, description="Endpoint(s) to replay against.")
    server: Server | None = Field(
        None, description="Engine to launch before the run and stop after it; None: the "
        "endpoints are already running.")
    clock: Literal["virtual", "wall"] | None = Field(
        None, description="virtual: the replay and the embedded simulator on one simulated "
        "clock, in this process, without HTTP (deterministic: the same scenario and seed give "
        "the same records whatever the host's load; every endpoint must be simulated); wall: "
        "real time over HTTP (to test a client or a router; host load moves the figures). "
        "None: virtual when every endpoint is simulated, else wall.")
    routing: Literal["round_robin", "session_affinity", "least_loaded", "random"] = Field(
        "session_affinity", description="Client-side routing across several endpoints.")
    trace: TraceSpec = Field(description="The workload to replay.")
    load: Load = Field(description="Closed-loop lanes or open-loop arrivals.")
    cold_stages: bool = Field(
        False, description="Reset every endpoint's prefix cache before each stage, so each "
        "starts cold (a simulated endpoint drops its cached blocks; a real one needs "
        "reset_cache).")
    timing: Timing = Field(default_factory=Timing, description="Turn timing.")
    warmup: Warmup = Field(default_factory=Warmup, description="Server warmup.")
    limits: Limits = Field(default_factory=Limits, description="Run bounds.")
    prompt: Prompt = Field(default_factory=Prompt, description="Prompt synthesis.")
    hardware: Hardware = Field(default_factory=Hardware, description="GPUs and their price.")
    prices: Prices | None = Field(None, description="API price table for comparison.")
    slos: SLOs = Field(default_factory=SLOs, description="Goodput objectives.")
    server_metrics: ServerMetrics = Field(default_factory=ServerMetrics,
                                          description="Prometheus scraping.")
    output: Output = Field(default_factory=Output, description="Results location.")
    fail_on: FailOn = Field(default_factory=FailOn,
                            description="When `agentbench run` exits 1 (a CI job's signal).")
    rules: Literal["agentx"] | None = Field(
        None, description="agentx: apply AgentX's locked settings and defaults (docs/agentx.md); "
        "a conflicting setting refuses to start, and the run gets a validity verdict.")
    unsafe_override: bool = Field(
        False, description="With rules: run despite conflicting settings; the run is then "
        "invalid with reason unsafe_override.")
    variants: list[Variant] = Field(
        default_factory=list,
        description="Run the scenario once per variant (a what-if experiment); each run "
        "lands in its own results folder and the runs are compared at the end.")

    @model_validator(mode="after")
    def _bounded(self) -> Scenario:
        lim = self.limits
        if lim.duration_s is None and lim.max_sessions is None and lim.max_requests is None \
                and lim.recycle:
            raise ValueError("limits: with recycle on, give duration_s, max_sessions or "
                             "max_requests so the run ends")
        if self.cold_stages:
            for i, e in enumerate(self.endpoints):
                if e.kind != "simulated" and getattr(e, "reset_cache", None) is None:
                    raise ValueError(f"cold_stages: endpoints[{i}] ({e.kind}) needs "
                                     "reset_cache (vllm, sglang or llama.cpp) to say how its "
                                     "cache is reset")
        if self.clock == "virtual" and any(e.kind != "simulated" for e in self.endpoints):
            raise ValueError("clock: virtual needs every endpoint to be kind: simulated (a real "
                             "server runs in real time); use clock: wall")
        return self

    @property
    def clock_mode(self) -> str:
        """The clock this scenario runs on: ``virtual`` or ``wall`` (see ``clock``)."""
        if self.clock is not None:
            return self.clock
        return "virtual" if all(e.kind == "simulated" for e in self.endpoints) else "wall"

    def preset_files(self) -> list[tuple[int, str]]:
        """(endpoint index, path) of each preset file a simulated endpoint names (its own,
        its prefill and decode pools')."""
        out = []
        for i, e in enumerate(self.endpoints):
            if e.kind != "simulated":
                continue
            d = e.disaggregation
            refs = [e.preset] + ([d.prefill.preset, d.decode.preset] if d is not None else [])
            out += [(i, r) for r in refs if r is not None and is_preset_path(r)]
        return out

    @property
    def runs_simulator(self) -> bool:
        """Whether an endpoint is the embedded simulator (it runs in the replay's process,
        which then has one CPU less for client work)."""
        return any(e.kind == "simulated" for e in self.endpoints)

    @property
    def simulator_speedups(self) -> tuple[set[float], bool]:
        """The ``speedup`` of each simulated endpoint, and whether every endpoint is
        simulated (a wall-clock run in simulated time then has one time factor)."""
        return ({e.speedup for e in self.endpoints if e.kind == "simulated"},
                all(e.kind == "simulated" for e in self.endpoints))

