"""Whether the client delivered the load it was asked for (``client_saturated``).

A client that runs out of CPU sends late: every figure of the run is then the figure of a
lighter load than the scenario says, and nothing else in the summary shows it. Two signs,
from the stored stamps alone:

- schedule lag (``sent_ns - scheduled_ns``): p50 above ``LAG_P50_MS`` (the typical
  request went out late) or p99 above ``LAG_P99_MS`` (a tail far beyond a burst's
  processing: lanes that finish together are served one after the other, which alone
  puts tens of ms into p99 on a healthy client);
- in-flight shortfall: the requests in flight on average over the requests the lanes
  wanted in flight, ``Σ(end − sent) / Σ(end − scheduled)``, below ``IN_FLIGHT_RATIO`` (a
  lane wants a request in flight from its scheduled time, so think time is not counted as
  a shortfall; with lanes always busy it is mean in-flight over the lanes that had work),
  when the mean lag is at least ``IN_FLIGHT_MIN_LAG_MS``: the shortfall is the lag over
  the requests' time, and below a millisecond a lag is the client's own cost per request
  (a turn of its loop), which more CPU would not take away; only requests a few ms long
  (an instant test server) make it a share of their time.

Checked per stage (each stage's measured requests); in virtual time there is no client
delay to see, so there is no verdict."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentbench.metrics.derive import Derived

#: schedule lag p50 / p99 above these (ms) say the client sent late
LAG_P50_MS = 10.0
LAG_P99_MS = 100.0
#: requests in flight / requests the lanes wanted in flight below this says the same
IN_FLIGHT_RATIO = 0.95
#: ... when the mean schedule lag (ms) is at least this
IN_FLIGHT_MIN_LAG_MS = 1.0
ADVICE = ("the client did not deliver the offered load: its figures are those of a lighter "
          "load. Give it more CPU: `agentbench run --workers N` (or `--workers auto`) "
          "shards lanes over N processes; check that nothing else runs on its cores, and "
          "that no max_concurrency or max_connections cap held requests back")


def stage_figures(d: Derived, m: np.ndarray) -> dict[str, Any] | None:
    """Lag p99 and in-flight figures of the requests in mask ``m`` (those sent)."""
    sent, sched, end = d.sent_ns[m], d.scheduled_ns[m], d.end_ns[m]
    keep = ~(np.isnan(sent) | np.isnan(sched) | np.isnan(end))
    if keep.sum() < 2:
        return None
    sent, sched, end = sent[keep], sched[keep], end[keep]
    lag_ms = (sent - sched) / 1e6
    window = float(end.max() - min(sent.min(), sched.min()))
    busy = float(np.maximum(end - sent, 0).sum())
    wanted = float(np.maximum(end - np.minimum(sched, sent), 0).sum())
    return {"requests": int(keep.sum()),
            "schedule_lag_mean_ms": round(float(np.maximum(lag_ms, 0).mean()), 3),
            "schedule_lag_p50_ms": round(float(np.percentile(lag_ms, 50)), 3),
            "schedule_lag_p99_ms": round(float(np.percentile(lag_ms, 99)), 3),
            "in_flight_mean": round(busy / window, 4) if window > 0 else None,
            "in_flight_wanted_mean": round(wanted / window, 4) if window > 0 else None,
            "in_flight_ratio": round(busy / wanted, 4) if wanted > 0 else None}


def _few(x: float | None) -> str:
    """A mean count of requests: one decimal, or two significant digits under 1 (0.043,
    not 0.0)."""
    if x is None:
        return "-"
    return f"{x:,.1f}" if x >= 1 else f"{x:.2g}"


def verdict(d: Derived, time_kind: str, stage_lanes: dict[str, int | None] | None = None,
            lag_p50_ms: float = LAG_P50_MS, lag_p99_ms: float = LAG_P99_MS,
            in_flight_ratio: float = IN_FLIGHT_RATIO,
            mask: np.ndarray | None = None) -> dict[str, Any] | None:
    """``{saturated, reasons, figures, thresholds, advice}``: saturated when any stage's
    lag p50 or p99 is above its threshold or its in-flight ratio below
    ``in_flight_ratio``; None in virtual time (no client delay exists there). ``mask``:
    only those requests (one node's)."""
    if time_kind == "virtual":
        return None
    figures: dict[str, Any] = {}
    reasons: list[str] = []
    for i, stage in enumerate(d.stages):
        m = d.measured & (d.stage_code == i)
        f = stage_figures(d, m if mask is None else m & mask)
        if f is None:
            continue
        lanes = (stage_lanes or {}).get(stage)
        if lanes:
            f["lanes"] = lanes
        figures[stage] = f
        where = f" ({stage})" if len(d.stages) > 1 else ""
        if f["schedule_lag_p50_ms"] > lag_p50_ms:
            reasons.append(f"schedule lag p50 {f['schedule_lag_p50_ms']:,.1f} ms > "
                           f"{lag_p50_ms:g} ms{where}")
        if f["schedule_lag_p99_ms"] > lag_p99_ms:
            reasons.append(f"schedule lag p99 {f['schedule_lag_p99_ms']:,.1f} ms > "
                           f"{lag_p99_ms:g} ms{where}")
        ratio = f["in_flight_ratio"]
        if ratio is not None and ratio < in_flight_ratio \
                and f["schedule_lag_mean_ms"] >= IN_FLIGHT_MIN_LAG_MS:
            of = f" of {lanes} lanes" if lanes else ""
            reasons.append(f"mean in flight {_few(f['in_flight_mean'])} of "
                           f"{_few(f['in_flight_wanted_mean'])} wanted{of} "
                           f"({ratio:.0%} < {in_flight_ratio:.0%}, mean lag "
                           f"{f['schedule_lag_mean_ms']:,.1f} ms){where}")
    return {"saturated": bool(reasons), "reasons": reasons, "figures": figures,
            "thresholds": {"schedule_lag_p50_ms": lag_p50_ms,
                           "schedule_lag_p99_ms": lag_p99_ms,
                           "in_flight_ratio": in_flight_ratio,
                           "in_flight_min_lag_ms": IN_FLIGHT_MIN_LAG_MS},
            "advice": ADVICE if reasons else None}


def by_node(d: Derived, run: dict[str, Any], time_kind: str) -> dict[str, Any] | None:
    """The verdict of each Ray node's requests (``Derived.ray_worker``), keyed
    ``hostname node-id[:8]``; None for a run not sent from Ray workers. Lanes are shared
    between nodes, so the in-flight ratio is each node's own."""
    workers = (run.get("ray") or {}).get("workers") or []
    if not workers or time_kind == "virtual":
        return None
    who = d.ray_worker(len(workers))
    nodes: dict[str, list[int]] = {}
    for w in workers:
        nodes.setdefault(f"{w['hostname']} {str(w['node'])[:8]}", []).append(int(w["worker"]))
    return {node: verdict(d, time_kind, mask=np.isin(who, ws)) for node, ws in nodes.items()}


#: an event-loop stall at least this long (ms) held every send of the client that long
STALL_WARN_MS = 1000.0


def stall_warning(run: dict[str, Any], time_kind: str) -> str | None:
    """A line when the client's event loop stalled for ``STALL_WARN_MS`` or more at once
    (run.json ``client_health``, the parent's and each worker's): no request went out
    meanwhile, whatever the rows say (20,000 lanes building their first prompts at once
    stalled it 8 s, and a run of 10 s sent nothing, with no verdict: there were no rows to
    judge). None in virtual time."""
    h = run.get("client_health")
    if time_kind == "virtual" or not isinstance(h, dict):
        return None
    parts = [h.get("parent"), *(h.get("workers") or [])] if "parent" in h else [h]
    worst = max((float(p["loop_stall_max_ms"]) for p in parts if isinstance(p, dict)
                 and isinstance(p.get("loop_stall_max_ms"), int | float)), default=0.0)
    if not worst >= STALL_WARN_MS:
        return None
    return (f"the client's event loop stalled for {worst / 1e3:,.1f} s at once "
            "(client_health.loop_stall_max_ms): no request went out meanwhile. Many lanes "
            "starting together (each builds its first prompt) or a busy host do this: shard "
            "the lanes with --workers N, and check what else runs on the client's cores")


def warning(v: dict[str, Any] | None) -> str | None:
    """The one-line warning the terminal summary and the report show, or None."""
    if not v or not v.get("saturated"):
        return None
    return f"client saturated: {'; '.join(v['reasons'])}: {v['advice']}"
