"""When to send a request again, and how long to wait first.

Three rules, each per endpoint:

- a retry policy (``endpoints[].retry``, off by default): a request that failed with one of
  the listed HTTP statuses or a connection error is sent again, up to ``max_attempts``
  in all, after the server's ``Retry-After`` when it gives one, else an exponential backoff
  (``backoff_s`` x 2^(attempt - 1), capped at ``max_backoff_s``). Every attempt is its own
  row in requests.parquet, so failed attempts count as failures;
- connection backoff (always): after a connection error, requests to that endpoint wait
  0.05 s x 2^(failures in a row - 1), capped at 5 s, before they are sent, so a server
  that is down (or restarting) is not hammered by every lane at once; one answer (any
  HTTP status) clears it;
- a circuit breaker (always, unless ``reconnect_s`` is 0): an endpoint whose connections
  have failed for ``reconnect_s`` with no answer in between is given up for the rest of
  the run (``LiveEndpoint.dead``): requests waiting to reconnect to it end, routing avoids
  it, and once every endpoint is given up the run stops (``RunContext.endpoint_unreachable``)
  instead of each remaining request waiting out ``reconnect_s`` in turn.
"""

from __future__ import annotations

from typing import Any

from agentbench.results import schema as records
from agentbench.results.schema import RequestRecord

NS = 1_000_000_000
CONNECT_BACKOFF_S = 0.05
CONNECT_BACKOFF_MAX_S = 5.0
CONNECT_ERRORS = ("connect_error", "connect_timeout")


def retryable(rec: RequestRecord, policy: Any) -> bool:
    """Whether ``rec``'s failure is one the policy retries."""
    if policy is None or rec.status != records.ERROR:
        return False
    on = set(policy.on)
    if rec.error_type in CONNECT_ERRORS:
        return "connect" in on
    return rec.http_status is not None and rec.http_status in on


def retry_delay_ns(attempt: int, policy: Any, retry_after_s: float | None) -> int:
    """Wait before attempt ``attempt + 1`` (``attempt`` >= 1 attempts made so far)."""
    if retry_after_s is not None:
        return int(min(retry_after_s, policy.max_backoff_s) * NS)
    return int(min(policy.backoff_s * 2 ** (attempt - 1), policy.max_backoff_s) * NS)


def note_outcome(ep: Any, rec: RequestRecord, now_ns: int) -> bool:
    """Update the endpoint's connection backoff and circuit breaker after ``rec``; True
    when this outcome gave the endpoint up (its connections failed for ``reconnect_s``)."""
    if rec.error_type in CONNECT_ERRORS:
        if ep.down_since_ns is None:
            ep.down_since_ns = now_ns
        ep.connect_failures += 1
        wait = min(CONNECT_BACKOFF_S * 2 ** (ep.connect_failures - 1), CONNECT_BACKOFF_MAX_S)
        until = now_ns + int(wait * NS)
        if ep.reconnect_ns > 0 and not ep.dead:
            give_up = ep.down_since_ns + ep.reconnect_ns
            if now_ns >= give_up:
                ep.dead_ns = now_ns
                return True
            until = min(until, give_up)  # the last try is at the give-up time, not after
        ep.blocked_until_ns = max(ep.blocked_until_ns, until)
    elif rec.http_status is not None:
        ep.connect_failures = 0
        ep.blocked_until_ns = 0
        ep.down_since_ns = None
    return False
