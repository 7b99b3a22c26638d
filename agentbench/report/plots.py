"""Report plots as PNG bytes (matplotlib, Agg backend). Lines and points come from the
summaries; distributions (CDFs) and timelines read raw rows, as the report may."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.metrics.catalog import METRICS


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def cdf(series: Sequence[tuple[str, npt.NDArray[np.float64]]], xlabel: str,
        title: str) -> bytes:
    """Empirical CDFs of one latency, one line per run (log x when it spans decades)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    spans = []
    for label, v in series:
        v = np.sort(v[~np.isnan(v)])
        if v.size == 0:
            continue
        ax.plot(v, np.arange(1, v.size + 1) / v.size, label=label)
        spans.append((v[0], v[-1]))
    if spans and min(a for a, _ in spans) > 0 and \
            max(b for _, b in spans) / min(a for a, _ in spans) > 100:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1 or series:
        ax.legend(fontsize=8)
    return _png(fig)


def lines(series: Sequence[tuple[str, Sequence[float], Sequence[float | None]]], xlabel: str,
          ylabel: str, title: str, logx: bool = False, percent: bool = False) -> bytes:
    """y vs x per run (points joined), e.g. TTFT p50 per context bucket or turn index."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, x, y in series:
        yy = np.array([np.nan if v is None else v for v in y], dtype=np.float64)
        ax.plot(np.asarray(x, dtype=np.float64), yy * (100 if percent else 1), marker="o",
                markersize=3, label=label)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def timeline(t_s: npt.NDArray[np.float64], tok_s: npt.NDArray[np.float64],
             in_flight: npt.NDArray[np.float64], title: str) -> bytes:
    """Throughput (tokens/s completed per interval) and requests in flight over time."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(t_s, tok_s, color="tab:blue", label="tokens/s")
    ax.set_xlabel("time since run start, s")
    ax.set_ylabel("tokens/s", color="tab:blue")
    ax2 = ax.twinx()
    ax2.step(t_s, in_flight, color="tab:orange", where="post", label="in flight")
    ax2.set_ylabel("requests in flight", color="tab:orange")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _png(fig)


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, title: str) -> bytes:
    """Horizontal bars, e.g. makespan per agent (session tree)."""
    plt = _plt()
    n = len(labels)
    fig, ax = plt.subplots(figsize=(6.4, max(2.0, min(0.22 * n + 1, 9))))
    ax.barh(np.arange(n), values, color="tab:green")
    ax.set_yticks(np.arange(n), labels, fontsize=7 if n > 20 else 8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


def pareto(summaries: Sequence[tuple[str, dict[str, Any]]], x_metric: str, title: str
           ) -> bytes:
    """Throughput per GPU (y) against ``x_metric`` (x) per sweep stage, one line per run."""
    plt = _plt()
    xm, ym = METRICS[x_metric], METRICS["throughput_per_gpu"]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for label, s in summaries:
        pts = [(xm.value(b), ym.value(b), st) for st, b in s.get("stages", {}).items()]
        pts = [(x, y, st) for x, y, st in pts if x is not None and y is not None]
        if not pts:
            continue
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        for x, y, st in pts:
            ax.annotate(st, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(f"{xm.label} ({xm.unit})")
    ax.set_ylabel(f"{ym.label} ({ym.unit})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)
