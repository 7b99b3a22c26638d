"""The load a stage delivered, beside the load it was labelled with (docs/metrics.md).

A stage of N lanes is labelled ``c=N``, but agents pause between calls (tool time, their
recorded think times) and a lane may start inside a pause of hours: the requests actually
in flight can be far fewer than N. From the stored stamps alone:

- ``lanes``: the lanes the stage configured (run.json ``stages[].lanes``; None for an open
  loop);
- ``lanes_active``: the lanes that sent at least one measured request;
- ``in_flight_mean``: Σ (end − sent) over the measured requests ÷ the stage's measured
  window, the time-average of requests in flight;
- ``in_flight_p50``: the median of requests in flight over that window (time-weighted);
- ``delivered_share``: ``in_flight_mean`` ÷ ``lanes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentbench.metrics.derive import Derived

#: a delivered share under this is named in the summary (and the rules' verdict details)
LOW_SHARE = 0.5


def delivered(d: Derived, m: np.ndarray, windows: list[tuple[int, int]],
              lanes: int | None) -> dict[str, Any]:
    """The delivered-load figures of the measured requests ``m`` over ``windows``."""
    sent, end = d.sent_ns[m], d.end_ns[m]
    keep = ~(np.isnan(sent) | np.isnan(end))
    sent, end = sent[keep], np.maximum(end[keep], sent[keep])
    span = float(sum(b - a for a, b in windows))
    lane_ids = d.df["lane"].to_numpy(dtype=np.int64)[m][keep]
    mean = float((end - sent).sum()) / span if span > 0 else None
    out: dict[str, Any] = {
        "lanes": lanes, "lanes_active": int(len(np.unique(lane_ids))),
        "in_flight_mean": None if mean is None else round(mean, 3),
        "in_flight_p50": _median_in_flight(sent, end, windows),
        "delivered_share": None if mean is None or not lanes else round(mean / lanes, 4)}
    return out


def _median_in_flight(sent: np.ndarray, end: np.ndarray,
                      windows: list[tuple[int, int]]) -> float | None:
    """The time-weighted median of the count of requests in flight within ``windows``."""
    if not len(sent) or not windows:
        return None
    t = np.concatenate([sent, end])
    step = np.concatenate([np.ones(len(sent)), -np.ones(len(end))])
    order = np.lexsort((step, t))  # at one instant, ends before starts
    t = t[order]
    level = np.maximum(np.cumsum(step[order]), 0).astype(np.int64)
    weight = np.zeros(int(level.max()) + 1)
    for a, b in windows:
        # the level holds from t[i] to t[i + 1]; each piece clipped to the window
        dur = np.clip(t[1:], a, b) - np.clip(t[:-1], a, b)
        weight += np.bincount(level[:-1], weights=dur, minlength=len(weight))
        weight[0] += max(0.0, min(float(t[0]), float(b)) - a)  # before the first send
        weight[0] += max(0.0, float(b) - max(float(t[-1]), float(a)))  # after the last end
    total = weight.sum()
    if total <= 0:
        return None
    return float(np.searchsorted(np.cumsum(weight), total / 2))


def low_load(stages: dict[str, dict[str, Any]]) -> list[str]:
    """A line per stage whose delivered share is under ``LOW_SHARE``."""
    out = []
    for label, b in stages.items():
        ld = b.get("load") or {}
        share = ld.get("delivered_share")
        if share is not None and share < LOW_SHARE:
            out.append(f"stage {label} delivered {ld['in_flight_mean']:,.2f} requests in "
                       f"flight on average for {ld['lanes']} lanes ({ld['lanes_active']} "
                       f"active; {share:.0%}): the agents' pauses leave the load far below "
                       "its label")
    return out
