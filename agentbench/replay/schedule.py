"""Schedules: pure, seeded functions returning absolute target times (integer ns from the
stage or session origin). The loop waits until the target and records it as
``scheduled_ns`` beside ``sent_ns``, so client lag is visible instead of accumulating.
Seed 0 is a seed.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterator, Sequence

import numpy as np

from agentbench.traces.model import Turn

NS = 1_000_000_000


def _rng(seed: int, *keys: int | str) -> np.random.Generator:
    h = hashlib.blake2b("\x00".join(map(str, (seed, *keys))).encode(), digest_size=8).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(h, "little")))


def arrival_offsets_ns(arrival: str, rate_per_s: float | None, seed: int, stage: int,
                       trace_starts_s: Sequence[float] = (), time_scale: float = 1.0,
                       ) -> Iterator[int]:
    """Arrival times of session trees, ns from the stage start.

    poisson: exponential gaps of mean 1/rate (seeded by seed and stage); constant: k/rate;
    trace: the recorded root start times (sorted, first at 0) x ``time_scale``, once.
    """
    if arrival == "trace":
        starts = sorted(trace_starts_s)
        if not starts:
            return
        first = starts[0]
        for s in starts:
            yield int(round((s - first) * time_scale * NS))
        return
    if rate_per_s is None or rate_per_s <= 0:
        raise ValueError("rate_per_s must be positive")
    if arrival == "constant":
        k = 0
        while True:
            yield int(round(k * NS / rate_per_s))
            k += 1
    if arrival != "poisson":
        raise ValueError(f"unknown arrival process {arrival!r}")
    rng = _rng(seed, "arrivals", stage)
    t = 0.0
    while True:
        gaps = rng.exponential(1.0 / rate_per_s, size=1024)
        for g in gaps:
            yield int(round(t * NS))
            t += float(g)


def turn_target_ns(strategy: str, turn: Turn, *, prev: Turn | None, ready_ns: int,
                   prev_sent_ns: int | None, session_start_ns: int, first_t: float,
                   time_scale: float, api_scale: float) -> int:
    """When turn ``turn`` of a session should be sent.

    ``ready_ns`` is when it may go at the earliest: the previous response ended (turn 0: the
    session's start), and every child joined here ended.
    - think-only: ``ready + think_s x time_scale``;
    - original: recorded start-to-start, ``session_start + (t - t_first) x time_scale``,
      where ``session_start`` is when the session's first turn was due (that turn, with no
      previous one, as think-only: a child's first think time counts from its start);
    - api-scaled: ``prev_sent + (prev api_s x api_scale + think_s) x time_scale``.
    A session is sequential: no target comes before ``ready_ns``.
    """
    if strategy == "think-only":
        return ready_ns + int(round(turn.think_s * time_scale * NS))
    if strategy == "original":
        if prev is None:
            return ready_ns + int(round(turn.think_s * time_scale * NS))
        target = session_start_ns + int(round((turn.t - first_t) * time_scale * NS))
        return max(target, ready_ns)
    if strategy == "api-scaled":
        if prev is None or prev_sent_ns is None:
            return ready_ns + int(round(turn.think_s * time_scale * NS))
        gap = ((prev.api_s or 0.0) * api_scale + turn.think_s) * time_scale
        return max(prev_sent_ns + int(round(gap * NS)), ready_ns)
    raise ValueError(f"unknown timing strategy {strategy!r}")


def warmup_start_turn(seed: int, lane: int, n_turns: int, random_start: bool,
                      min_ratio: float = 0.0, max_ratio: float = 1.0,
                      turn_times: Sequence[float] | None = None) -> int:
    """The turn t* a lane's first tree starts at: uniform over the root's turns from
    ``min_ratio`` to ``max_ratio`` of them (AgentX-style random start), or 0. With
    ``turn_times`` (the root's turn offsets, ``warmup.start_by: time``) the point is drawn
    over the recorded time instead, as AIPerf 0.13.0 does, and t* is the last turn sent
    at or before it."""
    if not random_start or n_turns <= 1:
        return 0
    if turn_times is not None and len(turn_times) == n_turns:
        first, last = float(turn_times[0]), float(turn_times[-1])
        if last > first:
            u = float(_rng(seed, "warmup-time", lane).uniform(min_ratio, max_ratio))
            at = first + u * (last - first)
            return max(0, min(n_turns - 1, bisect.bisect_right(turn_times, at) - 1))
    lo = min(int(min_ratio * n_turns), n_turns - 1)
    hi = min(max(lo + 1, math.ceil(max_ratio * n_turns)), n_turns)
    return int(_rng(seed, "warmup", lane).integers(lo, hi))


def choice_rng(seed: int, *keys: int | str) -> np.random.Generator:
    """A seeded generator for a named random choice (routing, shuffles)."""
    return _rng(seed, *keys)
