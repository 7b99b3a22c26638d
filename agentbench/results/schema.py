"""The raw results schema (docs/architecture.md#measurements,
docs/architecture.md#results-on-disk): what replay writes and metrics reads.

Times are integer nanoseconds of ``time.perf_counter_ns()`` relative to the run's start
(``run.json`` holds one wall-clock anchor, "not for latency"). Nullable columns are null
when the value was not observed (no first token, no ``usage``...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

REQUESTS_FILE = "requests.parquet"
SESSIONS_FILE = "sessions.parquet"
SERVER_METRICS_FILE = "server_metrics.parquet"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"

# request status values
OK = "ok"
ERROR = "error"
CANCELLED = "cancelled"
REQUEST_STATUSES = (OK, ERROR, CANCELLED)
#: a session's status beyond its requests' three: later turns never sent, or ended at its
#: first context overflow (also the ``error_type`` of the request that overflowed)
INCOMPLETE = "incomplete"
CONTEXT_OVERFLOW = "context_overflow"
SESSION_STATUSES = (*REQUEST_STATUSES, INCOMPLETE, CONTEXT_OVERFLOW)
# phase values
WARMUP = "warmup"
MEASURE = "measure"
PHASES = (WARMUP, MEASURE)

#: the largest usage count believed: 2**31 - 1, the int32 range of the per-event token
#: counts (``token_event_tokens``) split from ``completion_tokens``, and over 200x the
#: longest context window served (10M tokens). The transport keeps a count above it as
#: USAGE_MAX + 1 (so it fits every column); the metrics treat that as impossible usage
USAGE_MAX = 2**31 - 1

#: where a simulated request's time went, ns each (docs/metrics.md, "Where time goes"):
#: waiting for its (prefill) instance, prefill steps, loads from the CPU and shared tiers,
#: the KV transfer to its decode instance and the wait there (P/D), then decode (from the
#: first token, or in P/D from the decode admission); null for a real endpoint's rows and
#: for requests that did not finish
BREAKDOWN = ("sim_queue_ns", "sim_prefill_ns", "sim_tier_load_ns", "sim_transfer_ns",
             "sim_decode_queue_ns", "sim_decode_ns")

REQUESTS_SCHEMA = pa.schema([
    pa.field("request_id", pa.int64(), nullable=False),
    pa.field("stage", pa.string(), nullable=False),        # sweep stage label, e.g. "c=8"
    pa.field("phase", pa.string(), nullable=False),        # warmup | measure
    pa.field("endpoint", pa.string(), nullable=False),     # endpoint label (never a key)
    pa.field("lane", pa.int32(), nullable=False),
    pa.field("tree_id", pa.string(), nullable=False),      # root session id + copy, e.g. "t1#0"
    pa.field("session_id", pa.string(), nullable=False),   # trace session id
    pa.field("relation", pa.string(), nullable=False),     # root | fork | spawn
    pa.field("copy", pa.int32(), nullable=False),          # trace copy (cache-bust salt index)
    pa.field("turn", pa.int32(), nullable=False),
    pa.field("scheduled_ns", pa.int64(), nullable=False),  # when replay wanted to send
    pa.field("sent_ns", pa.int64()),                       # request handed to the socket
    pa.field("first_token_ns", pa.int64()),                # first token-bearing SSE event
    pa.field("last_token_ns", pa.int64()),                 # last token-bearing SSE event
    pa.field("end_ns", pa.int64()),                        # stream finished / error stamped
    pa.field("token_events", pa.int32()),                  # token-bearing SSE events
    pa.field("token_event_ns", pa.list_(pa.int64())),      # arrival of each such event
    pa.field("token_event_tokens", pa.list_(pa.int32())),  # tokens each event carried
    pa.field("prompt_tokens", pa.int64()),                 # usage, as the server reported
    pa.field("completion_tokens", pa.int64()),             # usage
    pa.field("cached_tokens", pa.int64()),                 # usage.prompt_tokens_details
    pa.field("expected_input_tokens", pa.int64(), nullable=False),   # from the trace
    pa.field("expected_output_tokens", pa.int64(), nullable=False),  # from the trace
    pa.field("potential_cached_tokens", pa.int64(), nullable=False),  # infinite-cache ceiling
    pa.field("status", pa.string(), nullable=False),       # ok | error | cancelled
    pa.field("http_status", pa.int32()),
    pa.field("error_type", pa.string()),
    pa.field("error_message", pa.string()),
    *[pa.field(name, pa.int64()) for name in BREAKDOWN],
])

SESSIONS_SCHEMA = pa.schema([
    pa.field("stage", pa.string(), nullable=False),
    pa.field("phase", pa.string(), nullable=False),
    pa.field("tree_id", pa.string(), nullable=False),
    pa.field("session_id", pa.string(), nullable=False),
    pa.field("parent_id", pa.string()),
    pa.field("relation", pa.string(), nullable=False),
    pa.field("lane", pa.int32(), nullable=False),
    pa.field("copy", pa.int32(), nullable=False),
    pa.field("endpoint", pa.string()),
    pa.field("turns_planned", pa.int32(), nullable=False),
    pa.field("turns_done", pa.int32(), nullable=False),
    pa.field("start_ns", pa.int64()),       # first turn sent
    pa.field("end_ns", pa.int64()),         # last turn ended (own turns)
    pa.field("makespan_ns", pa.int64()),    # roots: first turn sent -> whole tree ended
    pa.field("llm_wait_ns", pa.int64()),    # roots: sum of E2E on the tree's critical path
    # roots: the trace's recorded LLM time (api_s) of the same requests; null when a turn
    # on that path has none (docs/metrics.md, "Slowdown against the trace")
    pa.field("recorded_llm_ns", pa.int64()),
    pa.field("input_tokens", pa.int64(), nullable=False),
    pa.field("output_tokens", pa.int64(), nullable=False),
    pa.field("status", pa.string(), nullable=False),  # ok | error | cancelled | incomplete
])

SERVER_METRICS_SCHEMA = pa.schema([
    pa.field("time_ns", pa.int64(), nullable=False),
    pa.field("endpoint", pa.string(), nullable=False),
    pa.field("name", pa.string(), nullable=False),
    pa.field("labels", pa.map_(pa.string(), pa.string())),
    pa.field("value", pa.float64(), nullable=False),
])


@dataclass(slots=True)
class RequestRecord:
    """One request as it happened; ``chunks``/``chunk_ns`` hold the response body as it
    arrived (pieces, each stamped with the arrival of the read that brought its last byte)
    until the writer turns them into columns (``agentbench.transport.finish``)."""

    request_id: int
    stage: str
    phase: str
    endpoint: str
    lane: int
    tree_id: str
    session_id: str
    relation: str
    copy: int
    turn: int
    scheduled_ns: int
    expected_input_tokens: int
    expected_output_tokens: int
    potential_cached_tokens: int
    sent_ns: int | None = None
    end_ns: int | None = None
    http_status: int | None = None
    status: str = OK
    error_type: str | None = None
    error_message: str | None = None
    chunks: list[bytes] = field(default_factory=list)
    chunk_ns: list[int] = field(default_factory=list)
    #: what the stream said, when a transport knows it without bytes (the in-process
    #: simulator); HTTP leaves it None and the writer reads ``chunks``
    result: Any = None
    #: the API whose stream ``chunks`` are (``agentbench.transport.apis``); not written
    api: str = "chat"
    #: values redacted from what the stream said (an error event may echo a key); not
    #: written
    secrets: tuple[str, ...] = ()
    #: the server's Retry-After, seconds (429, 503), when it sent one; not written
    retry_after_s: float | None = None
    #: socket reads that brought the response after its head; instrumentation for
    #: client benchmarks (events arrive one per read unless the client fell behind), not
    #: written
    reads: int = 0
    #: where the request's time went, ns per ``BREAKDOWN`` column (the in-process
    #: simulator fills it for a finished request)
    breakdown_ns: tuple[int, ...] | None = None
