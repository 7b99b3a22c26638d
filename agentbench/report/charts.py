"""The two pictures a reader pastes: the AgentX chart (throughput per GPU against
interactivity across sweep stages and runs, Pareto front marked) and the swim-lane timeline
(one lane per agent slot over time, subagents as branches, requests in flight beneath).
Points come from summaries; the timeline reads sessions and requests rows, already in the
run's time base (``agentbench.metrics.run.Run``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agentbench.metrics.catalog import METRICS
from agentbench.report.plots import COLORS, WIDE, legend_outside, plt_module, png


def stage_points(summary: dict[str, Any], x_metric: str, y_metric: str
                 ) -> list[tuple[float, float, str]]:
    """(x, y, stage) of each sweep stage that has both figures, in stage order."""
    xm, ym = METRICS[x_metric], METRICS[y_metric]
    pts = [(xm.value(b), ym.value(b), _point_label(st, b))
           for st, b in summary.get("stages", {}).items()]
    return [(float(x), float(y), st) for x, y, st in pts if x is not None and y is not None]


def left_out(named: Sequence[tuple[str, dict[str, Any]]],
             x_metric: str = "interactivity_p50") -> list[str]:
    """A line naming the runs an ``agentx`` chart leaves out (no stage has both figures),
    and why; none when every run is on it."""
    left = [lab for lab, s in named if not stage_points(s, x_metric, "throughput_per_gpu")]
    if not left:
        return []
    if x_metric == "interactivity_p50":
        return [f"Not on the interactivity chart: {', '.join(left)} (no P50 interactivity: "
                "no successful request with more than one output token)."]
    return [f"Not on the E2E chart: {', '.join(left)} (no successful measured request)."]


def _point_label(stage: str, b: dict[str, Any]) -> str:
    """A stage's label with the load it delivered (``c=8, 1.3 in flight``): lanes that sit
    in the agents' pauses make ``c=8`` a lighter load than it reads."""
    mean = (b.get("load") or {}).get("in_flight_mean")
    return stage if mean is None else f"{stage}, {mean:,.1f} in flight"


def _span(values: list[float]) -> tuple[float, float]:
    """Axis limits around ``values``: from zero when they spread over more than half of
    their largest, else around them (points a few percent apart get the plot, not a corner
    of it; the ticks say where the axis starts)."""
    lo, hi = min(values), max(values)
    if hi <= 0:
        return 0.0, 1.0
    if lo < 0.5 * hi:
        return 0.0, hi * 1.12
    pad = max(hi - lo, 0.05 * hi) * 0.25
    return max(0.0, lo - pad), hi + pad


def _from_zero(lo: float) -> str:
    """An axis label's note when ``_span`` started the axis above zero, its start to three
    figures as the tick labels write numbers (2,110, not 2.11e+03)."""
    if lo <= 0:
        return ""
    start = (f"{round(lo, 2 - math.floor(math.log10(lo))):,.0f}" if lo >= 1000
             else f"{lo:.3g}")
    return f" (axis from {start}, not 0)"


def pareto_front(points: Sequence[tuple[float, float]], x_higher_better: bool = True
                 ) -> list[int]:
    """Indices of the points no other point beats on both axes (y: higher is better; x:
    higher or lower as told), ordered by x."""
    sign = 1.0 if x_higher_better else -1.0
    order = sorted(range(len(points)), key=lambda i: (-sign * points[i][0], -points[i][1]))
    front, best_y = [], -np.inf
    for i in order:
        if points[i][1] > best_y:
            front.append(i)
            best_y = points[i][1]
    return sorted(front, key=lambda i: points[i][0])


def agentx(runs: Sequence[tuple[str, dict[str, Any]]], title: str,
           x_metric: str = "interactivity_p50", y_metric: str = "throughput_per_gpu",
           time_note: str = "") -> bytes:
    """y (total tokens/s per GPU) against x (output tokens/s per user) for every sweep stage
    of every run, one colour per run, stages joined in order and labelled; the Pareto
    front over all points drawn as a grey band, its points ringed."""
    plt = plt_module()
    xm, ym = METRICS[x_metric], METRICS[y_metric]
    fig, ax = plt.subplots(figsize=WIDE)
    allpts: list[tuple[float, float]] = []
    labels: list[tuple[float, float, str, str]] = []
    for k, (label, s) in enumerate(runs):
        pts = stage_points(s, x_metric, y_metric)
        if not pts:
            continue
        c = COLORS[k % len(COLORS)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=7,
                color=c, label=label, zorder=3)
        labels += [(x, y, st, c) for x, y, st in pts]
        allpts += [(x, y) for x, y, _ in pts]
    if allpts:
        front = [allpts[i] for i in pareto_front(allpts, xm.better == "higher")]
        ax.plot([p[0] for p in front], [p[1] for p in front], color="0.6", linewidth=8,
                alpha=0.35, solid_capstyle="round", zorder=1, label="Pareto front")
        ax.scatter([p[0] for p in front], [p[1] for p in front], s=160, facecolors="none",
                   edgecolors="black", linewidths=1.2, zorder=4)
    xlabel = ("interactivity: output tokens/s per user (P50 of 1/TPOT)"
              if x_metric == "interactivity_p50" else f"{xm.label}, {xm.unit}")
    ylabel = ("total tokens/s per GPU" if y_metric == "throughput_per_gpu"
              else f"{ym.label}, {ym.unit}")
    if allpts:
        (x0, x1), (y0, y1) = (_span([p[i] for p in allpts]) for i in (0, 1))
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        _stage_labels(ax, labels)
        # a zoomed axis says so where the eye reads the axis, not only in its ticks
        xlabel += _from_zero(x0)
        ylabel += _from_zero(y0)
    ax.set_xlabel(xlabel + time_note)
    ax.set_ylabel(ylabel + time_note)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return png(fig)


def _stage_labels(ax: Any, labels: Sequence[tuple[float, float, str, str]]) -> None:
    """Each point's stage label beside it, in its run's colour, unless it would overlap
    one already placed (many runs' points crowd together: the legend and the line still
    tell them apart)."""
    placed: list[tuple[float, float, float, float]] = []  # boxes in display pixels
    dpi = ax.figure.dpi
    char_w, h = 0.6 * 8 * dpi / 72, 1.3 * 8 * dpi / 72  # an 8-point font
    right = ax.get_window_extent().x1  # the plot's right edge, display pixels
    for x, y, st, c in labels:
        px, py = ax.transData.transform((x, y))
        w = char_w * len(st)
        left = px + 5 + w > right  # past the frame (into the legend): on the point's left
        box = (px - 5 - w, py + 5, px - 5, py + 5 + h) if left else \
            (px + 5, py + 5, px + 5 + w, py + 5 + h)
        if any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
               for b in placed):
            continue
        placed.append(box)
        ax.annotate(st, (x, y), fontsize=8, xytext=(-5 if left else 5, 5),
                    textcoords="offset points", color=c, ha="right" if left else "left")


def _lane_rows(sessions: pd.DataFrame) -> pd.DataFrame:
    """Sessions with a drawing row: roots on their lane, children just below it (a few
    sub-rows, by start order within the tree)."""
    s = sessions.dropna(subset=["start_ns"]).copy()
    s["key"] = s["stage"].astype(str) + "|" + s["tree_id"].astype(str)
    s["child"] = s["relation"].astype(str) != "root"
    s = s.sort_values(["key", "child", "start_ns"])
    s["slot"] = s.groupby("key").cumcount().where(s["child"], 0)
    return s


def swimlane(sessions: pd.DataFrame, requests: pd.DataFrame, title: str,
             time_note: str = "", max_lanes: int = 48, t_max_s: float | None = None
             ) -> bytes:
    """One row per lane (agent slot) over time: a thin line while a session is alive,
    bars while its requests wait on the model; trees a lane runs one after another
    alternate in shade (recycling); subagents below their root, joined where they branch
    off; requests in flight beneath. Times in s, from the tables' own base; ``t_max_s``
    fixes the axis' end (one scale for several runs)."""
    plt = plt_module()
    lanes = sorted(int(x) for x in pd.unique(sessions["lane"]))[:max_lanes]
    shown = sessions[sessions["lane"].isin(lanes)]
    s = _lane_rows(shown)
    row_of = {ln: i for i, ln in enumerate(lanes)}
    s["y"] = s["lane"].map(row_of).astype(float) + np.where(
        s["child"], 0.42 + 0.14 * ((s["slot"] - 1) % 3), 0.0)
    s["tree_n"] = s.groupby("lane")["key"].transform(lambda k: pd.factorize(k)[0])
    height = min(2.2 + 0.32 * len(lanes), 16)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(WIDE[0], height + 1.8), sharex=True,
                                  gridspec_kw={"height_ratios": [height, 1.8]})
    root_c = ("tab:blue", "#7fb2e0")
    child_c = ("tab:orange", "#f5b971")
    start = s["start_ns"].to_numpy(np.float64) / 1e9
    end = np.where(s["end_ns"].isna(), np.nan, s["end_ns"].to_numpy(np.float64,
                                                                    na_value=np.nan)) / 1e9
    t_max = np.nanmax(end) if np.isfinite(end).any() else np.nanmax(start)
    end = np.where(np.isnan(end), t_max, end)
    colors = [(child_c if ch else root_c)[int(n) % 2] for ch, n in zip(s["child"], s["tree_n"],
                                                                         strict=True)]
    ax.hlines(s["y"], start, end, colors=colors, linewidth=1.2)
    ys = s["y"].to_numpy(np.float64)
    parent_y = dict(zip(zip(s["key"], s["session_id"].astype(str), strict=True), ys,
                        strict=True))
    for i, (key, par, ch) in enumerate(zip(s["key"], s["parent_id"], s["child"],
                                           strict=True)):
        if ch:  # the branch: from the parent's row down to the child's, where it starts
            py = parent_y.get((key, str(par)), np.floor(ys[i]))
            ax.plot([start[i], start[i]], [py, ys[i]], color=colors[i], linewidth=0.8)
    q = requests[requests["lane"].isin(lanes)].dropna(subset=["sent_ns", "end_ns"])
    q = q.assign(key=q["stage"].astype(str) + "|" + q["tree_id"].astype(str),
                 sid=q["session_id"].astype(str))[["key", "sid", "sent_ns", "end_ns"]]
    q = q.merge(s.assign(sid=s["session_id"].astype(str))[
        ["key", "sid", "y", "child", "tree_n"]], on=["key", "sid"], how="inner")
    qs = q["sent_ns"].to_numpy(np.float64) / 1e9
    qe = q["end_ns"].to_numpy(np.float64) / 1e9
    qc = [(child_c if ch else root_c)[int(n) % 2] for ch, n in zip(q["child"], q["tree_n"],
                                                                    strict=True)]
    # one LineCollection per kind (thick lines, not a patch per request: runs have 100k)
    for ch, width in ((False, 6.0), (True, 2.5)):
        sel = (q["child"] == ch).to_numpy(dtype=bool)
        if sel.any():
            ax.hlines(q["y"].to_numpy(np.float64)[sel], qs[sel], qe[sel],
                      colors=[c for c, k in zip(qc, sel, strict=True) if k],
                      linewidth=width, capstyle="butt")
    ax.set_yticks(range(len(lanes)), [f"lane {ln}" for ln in lanes],
                  fontsize=7 if len(lanes) > 24 else 8)
    ax.set_ylim(len(lanes) - 0.2, -0.6)
    ax.set_title(title if len(lanes) == sessions["lane"].nunique()
                 else f"{title} (first {len(lanes)} lanes)")
    ax.grid(alpha=0.3, axis="x")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=root_c[0], label="agent (root session)"),
                       Patch(color=root_c[1], label="next agent on the lane"),
                       Patch(color=child_c[0], label="subagent (fork/spawn)"),
                       Patch(color="0.5", label="bar: waiting on the model; line: alive")],
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    _in_flight(ax2, requests, time_note)
    if t_max_s is not None:  # runs side by side share one time axis
        ax2.set_xlim(0, t_max_s)
    for st, t0 in _stage_starts(requests):
        for a in (ax, ax2):
            a.axvline(t0, color="0.3", linestyle=":", linewidth=1)
        ax.annotate(st, (t0, -0.6), fontsize=8, xytext=(3, -10), textcoords="offset points")
    return png(fig)


def _stage_starts(requests: pd.DataFrame) -> list[tuple[str, float]]:
    first = requests.dropna(subset=["sent_ns"]).groupby("stage", observed=True)["sent_ns"].min()
    if len(first) < 2:
        return []
    return sorted(((str(k), float(v) / 1e9) for k, v in first.items()), key=lambda p: p[1])


def _in_flight(ax: Any, requests: pd.DataFrame, time_note: str) -> None:
    q = requests.dropna(subset=["sent_ns"])
    sent = q["sent_ns"].to_numpy(np.float64) / 1e9
    end = q["end_ns"].to_numpy(np.float64, na_value=np.nan) / 1e9
    end = np.where(np.isnan(end), np.nanmax(np.r_[sent, end]), end)
    t = np.concatenate([sent, end])
    step = np.concatenate([np.ones(len(sent)), -np.ones(len(end))])
    order = np.lexsort((step, t))  # an end before a start at the same instant
    ax.step(t[order], np.cumsum(step[order]), where="post", color="tab:purple")
    ax.set_ylabel("requests\nin flight")
    ax.set_xlabel(f"time since run start, s{time_note}")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


#: the parts of a simulated request's time, in stacking order, with their colours
WHERE = (("queue", "tab:gray"), ("prefill", "tab:blue"), ("tier_load", "tab:cyan"),
         ("transfer", "tab:orange"), ("decode_queue", "tab:red"), ("decode", "tab:green"))


def where_time_goes(runs: Sequence[tuple[str, dict[str, Any]]]) -> bytes | None:
    """One stacked bar per run: the mean ms of each part of a successful request's time
    in the simulator (summary ``overall.time_breakdown``); None when no run has it."""
    named: list[tuple[str, dict[str, Any]]] = []
    for lab, s in runs:
        tb = (s.get("overall") or {}).get("time_breakdown")
        if tb:
            named.append((lab, tb))
    if not named:
        return None
    plt = plt_module()
    n = len(named)
    fig, ax = plt.subplots(figsize=(WIDE[0], max(2.0, 0.5 * n + 1.2)))
    left = np.zeros(n)
    for part, color in WHERE:
        vals = np.array([float(tb["mean_ms"].get(part) or 0.0) / 1e3 for _, tb in named])
        if not vals.any():
            continue
        ax.barh(np.arange(n), vals, left=left, color=color, label=part.replace("_", " "))
        left += vals
    ax.set_yticks(np.arange(n), [lab for lab, _ in named], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean seconds per successful request (simulator)")
    ax.set_title("Where a request's time goes")
    ax.grid(alpha=0.3, axis="x")
    legend_outside(ax)
    return png(fig)
