"""Report plots as PNG bytes (matplotlib, Agg backend). Lines and points come from the
summaries; distributions (CDFs) and timelines read raw rows, as the report may.

Plots are drawn page-wide (``WIDE`` at ``DPI``), legends sit outside the axes so they never
cover data, and a run keeps one colour in every plot (``COLORS[i]`` for the i-th run)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

#: a CDF of at most this many values marks each one
SPARSE = 20
WIDE = (10.0, 4.6)   # inches: 1,000 px wide at DPI
DPI = 100
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
          "tab:pink", "tab:gray", "tab:olive", "tab:cyan")


def plt_module() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def thousands(fig: Any) -> None:
    """Whole-number ticks of 1,000 and over written with separators (100,000), as the
    report's tables write numbers, on every linear axis still on matplotlib's default
    formatter (which wrote 100000, or 1e6 in a corner); fractional ticks keep theirs."""
    from matplotlib.ticker import FuncFormatter, ScalarFormatter

    for ax in fig.axes:
        ax.get_xlim(), ax.get_ylim()  # the limits autoscaled before the ticks are read
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "linear" or \
                    type(axis.get_major_formatter()) is not ScalarFormatter:
                continue
            ticks = axis.get_majorticklocs()
            if len(ticks) and max(abs(ticks)) >= 1000 and all(t == round(t) for t in ticks):
                axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))


def png(fig: Any) -> bytes:
    thousands(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt_module().close(fig)
    return buf.getvalue()


def legend_outside(ax: Any) -> None:
    """The legend to the right of the axes (never over the data); none without labels."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
                  frameon=False)


def cdf(series: Sequence[tuple[str, npt.NDArray[np.float64]]], xlabel: str,
        title: str) -> bytes:
    """Empirical CDFs of one latency, one line per run (log x when it spans decades)."""
    plt = plt_module()
    fig, ax = plt.subplots(figsize=WIDE)
    spans = []
    for k, (label, v) in enumerate(series):
        v = np.sort(v[~np.isnan(v)])
        if v.size == 0:
            continue
        # a few values get markers: a run of one request is one point, no line at all
        ax.plot(v, np.arange(1, v.size + 1) / v.size, label=label,
                color=COLORS[k % len(COLORS)], marker="o" if v.size <= SPARSE else None,
                markersize=4)
        spans.append((v[0], v[-1]))
    if spans and min(a for a, _ in spans) > 0 and \
            max(b for _, b in spans) / min(a for a, _ in spans) > 100:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return png(fig)


# a series: (label, x, y) or (label, x, y, run index, dashed)
Series = tuple[Any, ...]


def lines(series: Sequence[Series], xlabel: str, ylabel: str, title: str,
          logx: bool = False, percent: bool = False) -> bytes:
    """y vs x per run (points joined), e.g. TTFT p50 per context bucket or turn index. A
    series may name its run (its colour) and ask for a dashed line (a p90, a ceiling)."""
    plt = plt_module()
    fig, ax = plt.subplots(figsize=WIDE)
    for k, sr in enumerate(series):
        label, x, y = sr[:3]
        run = sr[3] if len(sr) > 3 else k
        dashed = bool(sr[4]) if len(sr) > 4 else False
        yy = np.array([np.nan if v is None else v for v in y], dtype=np.float64)
        ax.plot(np.asarray(x, dtype=np.float64), yy * (100 if percent else 1),
                marker="o", markersize=3, label=label, color=COLORS[run % len(COLORS)],
                linestyle="--" if dashed else "-", alpha=0.75 if dashed else 1.0)
    if logx:
        ax.set_xscale("log", base=2)
    if percent:  # a share's axis from 0 (all-zero shares got -0.04% to 0.04%)
        ax.set_ylim(0.0, max(ax.get_ylim()[1], 1.0))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return png(fig)


def timeline(t_s: npt.NDArray[np.float64], tok_s: npt.NDArray[np.float64],
             in_flight: npt.NDArray[np.float64], title: str, time_note: str = "") -> bytes:
    """Throughput (tokens/s completed per interval) and requests in flight over time."""
    plt = plt_module()
    fig, ax = plt.subplots(figsize=WIDE)
    ax.plot(t_s, tok_s, color="tab:blue", label="tokens/s completed")
    ax.set_xlabel(f"time since run start, s{time_note}")
    ax.set_ylabel(f"tokens/s{time_note}", color="tab:blue")
    ax2 = ax.twinx()
    ax2.step(t_s, in_flight, color="tab:orange", where="post", label="requests in flight")
    ax2.set_ylabel("requests in flight", color="tab:orange")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", bbox_to_anchor=(1.08, 1), fontsize=8,
              frameon=False)
    return png(fig)


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, title: str) -> bytes:
    """Horizontal bars, e.g. makespan per agent (session tree)."""
    plt = plt_module()
    n = len(labels)
    fig, ax = plt.subplots(figsize=(WIDE[0], max(2.4, min(0.24 * n + 1, 11))))
    ax.barh(np.arange(n), values, color="tab:green")
    ax.set_yticks(np.arange(n), labels, fontsize=7 if n > 20 else 8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="x")
    return png(fig)
