"""Endpoint settings of a scenario: a remote OpenAI-compatible server (``openai``), the
embedded simulator (``simulated``), and an engine process agentbench starts around the run
(``server``). Opening them at run time is ``agentbench.transport.opener``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from agentbench.scenario.strict import PrintableLine, Strict, json_only
from agentbench.traces import MAX_BLOCK_SIZE

#: the bounds of a simulated endpoint's ``speedup`` (also checked where a run.json is read:
#: ``agentbench.results.runshape``)
MIN_SPEEDUP, MAX_SPEEDUP = 1e-3, 1e6

# ---------------------------------------------------------------- endpoints

#: an HTTP header name (RFC 9110 token) and what a header value may not hold: a control
#: character but tab (a line break would end the header; aiohttp refuses them all)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent as an HTTP header, or None. The value is never
    quoted (it may be a secret)."""
    if not _HEADER_NAME.fullmatch(name):
        return (f"header name {name!r} is not an HTTP token (letters, digits and "
                "!#$%&'*+.^_`|~-)")
    if _HEADER_CONTROL.search(value):
        return (f"header {name}: its value holds a control character (a line break, NUL, "
                "...), which HTTP cannot send")
    return None



#: what a retry policy retries on: an HTTP status, or 'connect' for connection errors
RetryOn = Annotated[int, Field(ge=100, le=599)] | Literal["connect"]


def _default_retry_on() -> list[RetryOn]:
    return [429, 503, "connect"]


class Retry(Strict):
    """Sending a failed request again (off unless ``max_attempts`` > 1)."""

    max_attempts: int = Field(1, ge=1, le=10, description="Attempts in all per request; 1: "
                              "no retries.")
    on: list[RetryOn] = Field(
        default_factory=_default_retry_on,
        description="HTTP statuses (and 'connect' for connection errors) that are retried.")
    backoff_s: float = Field(0.5, gt=0, description="First wait; doubled each attempt "
                             "(the server's Retry-After wins when it sends one).")
    max_backoff_s: float = Field(30.0, gt=0, description="Longest wait between attempts.")


class OpenAIEndpoint(Strict):
    """A real server speaking the OpenAI API (vLLM, SGLang, llama.cpp, a router...)."""

    kind: Literal["openai"] = Field("openai", description="A remote OpenAI-compatible server.")
    name: PrintableLine | None = Field(None, description="Label in results; defaults to the URL.")
    url: str = Field(pattern=r"^https?://\S+$",
                     description="Base URL, e.g. http://localhost:8000 (with or without /v1).")

    @field_validator("url", "metrics_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        from urllib.parse import urlsplit

        if v is None:
            return v
        try:
            u = urlsplit(v)
            u.port  # noqa: B018 - raises on a port outside 0-65535
        except ValueError as e:
            raise ValueError(f"not a usable URL: {e}") from None
        if not u.hostname:
            raise ValueError("the URL names no host")
        return v
    api: Literal["chat", "completions", "responses", "messages"] = Field(
        "chat", description="/v1/chat/completions (text blocks), /v1/completions (token-id "
        "blocks), /v1/responses (OpenAI Responses, text blocks) or /v1/messages (Anthropic "
        "Messages, text blocks; the key in x-api-key).")
    model: PrintableLine = Field(description="Model name sent in the request body.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable holding the API key; the key "
        "itself never appears in a scenario or in results.")
    headers: dict[str, str] = Field(default_factory=dict,
                                    description="Extra HTTP headers sent with every request.")
    extra_body: dict[str, Any] = Field(default_factory=dict,
                                       description="Extra JSON fields merged into every body.")

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            problem = header_problem(name, value)
            if problem:
                raise ValueError(problem)
        return v

    @field_validator("extra_body")
    @classmethod
    def _body(cls, v: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(set(v) & {"messages", "prompt", "stream"})
        if reserved:
            raise ValueError(f"may not set {', '.join(reserved)} (the replay writes them)")
        return json_only(v)

    @model_validator(mode="after")
    def _body_for_api(self) -> OpenAIEndpoint:
        """The fields that carry (or add to) the prompt in this endpoint's API."""
        own = {"responses": {"input", "instructions"}, "messages": {"system"}}.get(self.api,
                                                                                   set())
        clash = sorted(own & set(self.extra_body))
        if clash:
            raise ValueError(f"extra_body may not set {', '.join(clash)} with api: {self.api} "
                             "(it would change the prompt the trace describes)")
        return self
    reset_cache: Literal["vllm", "sglang", "llama.cpp"] | None = Field(
        None, description="How this server's prefix cache is reset (cold_stages): vllm "
        "POST /reset_prefix_cache (vLLM serves it with VLLM_SERVER_DEV_MODE=1), sglang POST "
        "/flush_cache, llama.cpp POST /slots/{id}?action=erase for every slot of GET /slots.")
    ignore_eos: bool | None = Field(
        None, description="Send ignore_eos/min_tokens so outputs follow the trace; None: "
        "probe whether the server accepts them.")
    metrics_url: str | None = Field(
        None, description="Prometheus /metrics URL; None: <url>/metrics when it answers.")
    preflight: bool = Field(
        True, description="Send one request before the run; an endpoint that cannot be "
        "reached or refuses the key or model (401/403/404) stops the run with a one-line "
        "error instead of a run of failed requests.")
    timeout_s: float = Field(600.0, gt=0, description="Per-request timeout (whole stream).")
    retry: Retry = Field(default_factory=Retry, description="Retry policy (off by default); "
                         "connection errors always back off (see agentbench/replay/retry.py).")
    stall_timeout_s: float = Field(
        120.0, gt=0, description="Fail a stream that sends nothing for this long.")
    follow_redirects: bool = Field(
        False, description="Follow a 307/308 redirect within the same origin (scheme, host, "
        "port), re-sending the request; never to another origin (the credentials would "
        "follow). Off: a redirect is an http_3xx error naming the Location.")
    reconnect_s: float = Field(
        60.0, ge=0, le=86400, description="How long a request whose connection is refused "
        "keeps trying (backing off 0.05 s doubling to 5 s) before it counts as a failed "
        "request; each try is its own row (connect_error) but none spends the request "
        "budget, so a server that restarts does not use up max_requests. 0: one try.")
    max_connections: int = Field(
        0, ge=0, description="Connection pool size; 0 = no limit (one per request in flight).")
    context_overflow_phrases: list[str] | None = Field(
        None, description="Error-body phrases (case-insensitive substrings) that make a failed "
        "request a context_overflow (its session ends there); None: the engines' own "
        "(vLLM, SGLang, llama.cpp, TensorRT-LLM, OpenAI, Anthropic; "
        "agentbench/replay/overflow.py); []: no detection.")


class SharedTier(Strict):
    """A distributed KV store shared by all simulated instances (e.g. Mooncake Store)."""

    capacity_blocks: int = Field(gt=0, description="Blocks the shared tier holds (LRU); every "
                                 "instance writes its prompts' full blocks through to it.")
    load_s_per_token: float | None = Field(
        None, ge=0, description="Simulated seconds to load one cached token from the tier into "
        "an instance (instead of recomputing it); None: the preset's figure.")
    latency_s: float = Field(
        0.0, ge=0, le=60, description="Fixed cost of each load from the tier (a lookup and "
        "an RDMA read's setup), beside the per-token time.")


Router = Literal["round_robin", "session_affinity", "least_loaded", "cache_aware", "random"]


#: the slowest KV link, Gb/s (1 Mb/s, far below any link a KV cache moves over): at 1e-9
#: one token's KV took a month of simulated time, so no request finished and a run bounded
#: by its requests went on for hours of wall time
MIN_LINK_GBPS = 1e-3


class KvLink(Strict):
    """The link that carries a request's KV cache from its prefill instance to its decode
    instance (RDMA between nodes, NVLink within one): a transfer takes ``latency_s`` plus
    its bytes over ``bandwidth_gbps`` (agentbench/sim/disagg.py)."""

    bandwidth_gbps: float = Field(
        200.0, ge=MIN_LINK_GBPS, le=1e6, description="Gigabits per second one transfer "
        "gets (200: one 200 Gb/s RDMA NIC, 25 GB/s; 3600: NVLink 4's 450 GB/s one way).")
    latency_s: float = Field(
        0.0005, ge=0, le=60, description="Fixed cost of one transfer (connection, "
        "handshake, the decode side's scheduling of the pull).")
    overlap: bool = Field(
        True, description="The KV streams layer by layer while the prefill runs, so only "
        "the part that outlasts the prefill adds to the request's time; False: the whole "
        "transfer starts when the prefill ends.")
    kv_bytes_per_token: float | None = Field(
        None, gt=0, le=1e9, description="KV bytes per token moved (layers x KV heads x head "
        "dim x 2 x dtype bytes, or the latent size for MLA); None: the prefill preset's.")


class Pool(Strict):
    """A group of simulated instances doing one phase (prefill or decode)."""

    instances: int = Field(1, gt=0, le=10_000, description="Instances in the pool.")
    preset: str | None = Field(
        None, description="The pool's timing preset (a shipped name or a preset file; a "
        "different parallel size is a different preset); None: the endpoint's.")
    router: Router = Field(
        "least_loaded", description="How the pool picks an instance; for the decode pool, "
        "cache_aware picks the one already holding most of the session's KV (the least to "
        "transfer).")


class Disaggregation(Strict):
    """Prefill/decode disaggregation: a request prefills in the prefill pool (its prefix
    cache and the shared tier apply there), its KV moves over ``link``, and it decodes in
    the decode pool, whose first token the client sees (docs/simulator.md)."""

    prefill: Pool = Field(description="The prefill pool.")
    decode: Pool = Field(description="The decode pool.")
    link: KvLink = Field(default_factory=KvLink, description="The KV transfer link.")
    decode_keeps_kv: bool = Field(
        True, description="A decode instance keeps a finished turn's KV in its prefix "
        "cache, so a session's next turn routed back to it moves only the tokens it lacks "
        "(vLLM's NIXL connector pulls only the blocks not cached locally); False: every "
        "turn moves its whole prompt.")


class NvmeTier(Strict):
    """A per-instance NVMe offload tier behind the CPU one (LMCache and vLLM's offloading
    connectors write KV to local disk): write-through, LRU, loaded at its bandwidth plus a
    per-load latency."""

    capacity_blocks: int = Field(gt=0, description="Blocks one instance's NVMe tier holds.")
    bandwidth_gbps: float = Field(
        56.0, gt=0, le=1e6, description="Read bandwidth in Gb/s (56: one PCIe Gen4 x4 SSD's "
        "7 GB/s; 112: PCIe Gen5); a load of n tokens takes n x KV bytes per token over it.")
    latency_s: float = Field(
        0.0001, ge=0, le=60, description="Fixed cost of each load (a read's latency).")
    load_s_per_token: float | None = Field(
        None, ge=0, le=1.0, description="Seconds per token loaded, instead of the bandwidth "
        "(a fitted preset records no KV bytes per token).")

    @model_validator(mode="after")
    def _one_speed(self) -> NvmeTier:
        if self.load_s_per_token is not None and "bandwidth_gbps" in self.model_fields_set:
            raise ValueError("give bandwidth_gbps or load_s_per_token, not both")
        return self


def is_preset_path(ref: str) -> bool:
    """Whether a simulated endpoint's ``preset`` is a file path rather than a shipped
    preset's name (a name has no path separator and no .yaml ending)."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref or "\\" in ref


class SimulatedEndpoint(Strict):
    """The embedded KV-cache-aware serving simulator, started in its own process for the run."""

    kind: Literal["simulated"] = Field(description="Start agentbench's serving simulator.")
    name: PrintableLine | None = Field(None, description="Label in results; defaults to 'sim'.")
    api: Literal["chat", "completions", "responses", "messages"] = Field(
        "chat", description="API the replay uses (the simulator serves all four).")
    model: PrintableLine = Field("sim", description="Model name the simulator serves.")
    preset: str = Field("h200-llama3-70b",
                        description="Hardware/model timing preset: a shipped one's name "
                        "(`serve-sim --list-presets`) or the path of a preset YAML file, "
                        "relative to the scenario's folder (docs/engines.md, \"Simulator "
                        "presets\").")
    instances: int = Field(1, gt=0, le=10_000,
                           description="Inference instances behind the router.")
    router: Router = Field(
        "round_robin", description="Server-side routing policy; session_affinity keys on the "
        "X-Session-ID request header, else the body's `user` field.")
    block_size: int = Field(16, gt=0, le=MAX_BLOCK_SIZE,
                            description="KV cache block size in tokens.")
    cache_blocks: int | None = Field(
        None, gt=0, description="Per-instance GPU KV capacity in blocks; None: the preset's.")
    cpu_offload_blocks: int = Field(
        0, ge=0, description="Per-instance CPU offload tier capacity in blocks (write-through, "
        "LRU); 0: none.")
    cpu_offload_latency_s: float = Field(
        0.0, ge=0, le=60, description="Fixed cost of each load from the CPU tier, beside the "
        "preset's per-token time.")
    nvme_tier: NvmeTier | None = Field(
        None, description="Optional per-instance NVMe tier (behind the CPU one).")
    shared_tier: SharedTier | None = Field(None, description="Optional shared KV tier.")
    speedup: float = Field(1.0, ge=MIN_SPEEDUP, le=MAX_SPEEDUP,
                           description="clock: wall only: divide every simulated duration by "
                           "this (the HTTP simulator answers that much faster than real "
                           "time), 0.001-1e6 (1e308 made the clock infinite and every request "
                           "wait forever); no effect in virtual time.")
    max_num_batched_tokens: int | None = Field(
        None, gt=0, description="Token budget of one engine step; None: the preset's.")
    max_num_seqs: int | None = Field(
        None, gt=0, description="Most requests running at once per instance; None: the preset's.")
    cache_aware_max_imbalance: int = Field(
        4, ge=0, description="cache_aware router: only instances with at most this many more "
        "requests than the least loaded one compete on cached blocks.")
    seed: int = Field(0, ge=0, description="Seed of the random router.")
    max_context_tokens: int | None = Field(
        None, gt=0, description="The model's context window: a request whose prompt plus "
        "output (max_tokens when forced) exceeds it is refused with HTTP 400 and vLLM's "
        "'maximum context length' message, as the OpenAI API does; None: the preset's "
        "(figures.max_context_tokens), where, as vLLM 0.32 and llama.cpp do, only a prompt "
        "leaving no room for output is refused and a longer output is cut at the window; "
        "without one only the KV capacity limits a request.")
    context_overflow_phrases: list[str] | None = Field(
        None, description="As for an openai endpoint: error phrases that count as a context "
        "overflow; None: the engines' own.")
    disaggregation: Disaggregation | None = Field(
        None, description="Separate prefill and decode pools joined by a KV link; "
        "`instances` is then their sum (set it only to that) and `router` is unused.")

    def pools(self) -> list[tuple[str, str, str, int]]:
        """(role, key, preset, instances) of each group of instances: one ("", "preset",
        ...) without disaggregation, else the prefill pool and the decode pool; ``key``
        names the setting the preset came from (a pool without its own runs the
        endpoint's)."""
        d = self.disaggregation
        if d is None:
            return [("", "preset", self.preset, self.instances)]
        return [(role, "preset" if pool.preset is None else f"disaggregation.{role}.preset",
                 pool.preset or self.preset, pool.instances)
                for role, pool in (("prefill", d.prefill), ("decode", d.decode))]

    @model_validator(mode="after")
    def _pools(self) -> SimulatedEndpoint:
        if self.cpu_offload_latency_s and not self.cpu_offload_blocks:
            raise ValueError("cpu_offload_latency_s is set but there is no CPU tier (set "
                             "cpu_offload_blocks)")
        d = self.disaggregation
        if d is None:
            return self
        total = d.prefill.instances + d.decode.instances
        if self.instances == total:
            return self
        if "instances" in self.model_fields_set:
            raise ValueError(f"instances is {self.instances} but the prefill and decode "
                             f"pools hold {total}: leave instances out or set it to {total}")
        self.instances = total
        return self


Endpoint = Annotated[OpenAIEndpoint | SimulatedEndpoint, Field(discriminator="kind")]


class Server(Strict):
    """An engine process agentbench starts before the run and stops after it (by the PID of
    its own process group); its log and exit status are kept in the results folder."""

    command: str | list[str] = Field(
        description="Program and arguments (a string is split like a shell would). ${VAR} "
        "and ${VAR:-default} take values from the environment; {python} is the Python "
        "running agentbench (e.g. '{python} -m agentbench.engines llama-server ...').")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables (${VAR} expanded); "
        "written to run.json as given, so refer to secrets as ${VAR}, never inline.")
    cwd: str | None = Field(None, description="Working directory (relative to the scenario "
                            "file); None: the current one.")
    health_url: str = Field(
        description="URL that answers HTTP 200 once the server is ready, e.g. "
        "http://127.0.0.1:8080/health.")
    startup_timeout_s: float = Field(
        300.0, gt=0, description="Give up (and stop the process) when not healthy by then.")
    stop_timeout_s: float = Field(
        30.0, gt=0, description="After SIGTERM, wait this long before SIGKILL.")
    log_file: str | None = Field(
        None, description="Where the server's stdout+stderr go (relative to the scenario "
        "file); None: server.log in the run folder. A copy lands in the run folder.")


def is_simulated(endpoint: Any) -> bool:
    """Whether an endpoint is agentbench's serving simulator: an endpoint model, or its
    data as run.json keeps it. Outside the scenario model and the transport opener
    (``agentbench.transport.opener``), code asks this, never an endpoint's ``kind``."""
    kind = (endpoint.get("kind") if isinstance(endpoint, Mapping)
            else getattr(endpoint, "kind", None))
    return kind == "simulated"
