"""When to send a request again, and how long to wait first.

Two rules, both per endpoint:

- a retry policy (``endpoints[].retry``, off by default): a request that failed with one of
  the listed HTTP statuses or a connection error is sent again, up to ``max_attempts``
  in all, after the server's ``Retry-After`` when it gives one, else an exponential backoff
  (``backoff_s`` x 2^(attempt - 1), capped at ``max_backoff_s``). Every attempt is its own
  row in requests.parquet, so failed attempts count as failures;
- connection backoff (always): after a connection error, requests to that endpoint wait
  0.05 s x 2^(failures in a row - 1), capped at 5 s, before they are sent, so a server
  that is down (or restarting) is not hammered by every lane at once; one success clears
  it.
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


def note_outcome(ep: Any, rec: RequestRecord, now_ns: int) -> None:
    """Update the endpoint's connection backoff after ``rec``."""
    if rec.error_type in CONNECT_ERRORS:
        ep.connect_failures += 1
        wait = min(CONNECT_BACKOFF_S * 2 ** (ep.connect_failures - 1), CONNECT_BACKOFF_MAX_S)
        ep.blocked_until_ns = max(ep.blocked_until_ns, now_ns + int(wait * NS))
    elif rec.http_status is not None:
        ep.connect_failures = 0
        ep.blocked_until_ns = 0
