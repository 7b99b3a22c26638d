"""Side-by-side comparison of run summaries, with ratios against the first run in the form
published results use ("throughput 3.8x, P50 TTFT 46x lower, hit rate 1.7% → 92.2%").
Formats summaries only; nothing is recomputed.

Runs are named by their scenario (a variant's run is ``<scenario>-<variant>``; the part
every name shares is dropped, so variants read "round-robin", "shared-tier"); when two
runs carry the same name, every run is named by its run id instead."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from agentbench.metrics.catalog import METRICS, Metric, format_value, shows_zero

# figures the summary holds that the shared catalog does not name (report-only rows)
EXTRA: dict[str, Metric] = {m.name: m for m in [
    Metric("input_throughput_per_gpu", "input throughput/GPU",
           ("throughput", "per_gpu_input_tok_s"), "tok/s", "higher"),
    Metric("output_throughput_per_gpu", "output throughput/GPU",
           ("throughput", "per_gpu_output_tok_s"), "tok/s", "higher"),
]}

# the comparison table, grouped: throughput, latency, cache, agents, cost (every cost entry
# the catalog holds is added after these, in catalog order)
COMPARISON = ("throughput_per_gpu", "input_throughput_per_gpu", "output_throughput_per_gpu",
              "throughput", "interactivity_p50", "ttft_p50", "ttft_p90", "tpot_p50",
              "e2e_p50", "hit_rate_potential", "hit_rate", "achieved_over_potential",
              "hit_rate_server", "goodput", "agent_goodput", "makespan_p50", "llm_wait_p50",
              "error_rate")
# where the eye should land first: what a reader of a comparison acts on
KEY_ROWS = ("throughput_per_gpu", "ttft_p50", "hit_rate", "achieved_over_potential",
            "cost_per_agent")


def metric(name: str) -> Metric:
    """A catalog metric, or one of the report's own rows (``EXTRA``)."""
    return METRICS[name] if name in METRICS else EXTRA[name]


def comparison_metrics() -> list[str]:
    """The comparison's rows: ``COMPARISON``, then the catalog's cost entries."""
    names = [n for n in COMPARISON if n in METRICS or n in EXTRA]
    return names + [n for n, m in METRICS.items() if m.path[:1] == ("cost",)
                    and n not in names]


def _common_prefix(names: Sequence[str]) -> str:
    """The leading part every name shares, cut back to a '-', '_' or ' ' boundary."""
    if len(names) < 2:
        return ""
    p = names[0]
    for n in names[1:]:
        while not n.startswith(p):
            p = p[:-1]
    cut = max(p.rfind(c) for c in "-_ ")
    return p[:cut + 1] if cut >= 0 else ""


def run_labels(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Unique display names: scenario (variant) names when they are distinct, with the part
    all share dropped; otherwise run ids, suffixed when two are equal."""
    names = [str(s.get("run", {}).get("name") or "") for s in summaries]
    if all(names) and len(set(names)) == len(names):
        pre = _common_prefix(names)
        short = [n[len(pre):] for n in names]
        return short if all(short) and len(set(short)) == len(short) else names
    labels: list[str] = []
    for i, s in enumerate(summaries):
        base = str(s.get("run", {}).get("run_id") or f"run{i + 1}")
        label = base
        k = 2
        while label in labels:
            label = f"{base} ({k})"
            k += 1
        labels.append(label)
    return labels


def shared_name(summaries: Sequence[dict[str, Any]]) -> str:
    """The part of the runs' names that ``run_labels`` dropped ('pd-ratio-codex' for
    'pd-ratio-codex-agg' and 'pd-ratio-codex-p2d6'), without its trailing separator;
    '' when the labels are the full names or run ids."""
    names = [str(s.get("run", {}).get("name") or "") for s in summaries]
    labels = run_labels(summaries)
    if labels == names or not all(names):
        return ""
    return _common_prefix(names).rstrip("-_ ")


def _times(r: float) -> str:
    return f"{r:.0f}x" if r >= 10 else f"{r:.1f}x"


def change(m: Metric, base: float | None, cand: float | None) -> str:
    """How ``cand`` differs from ``base``, published style: '3.8x', '46x lower',
    '1.7% → 92.2%'; under a 1.05x change, in percent ('4.1% lower'); 'same' when the
    two values agree to 0.5% (or print the same); '-' when one is missing; the two
    values, not a ratio, when one is or prints as zero."""
    if base is None or cand is None or math.isnan(base) or math.isnan(cand):
        return "-"
    a, b = format_value(m, base), format_value(m, cand)
    if a == b or (base != 0 and abs(cand / base - 1) < 0.005):
        return "same"
    if m.share or base == 0 or cand == 0 or (base < 0) != (cand < 0) \
            or shows_zero(a) or shows_zero(b):
        return f"{a} → {b}"
    r = cand / base
    if abs(r - 1) < 0.05:
        return f"{abs(100 * (r - 1)):.1f}% {'lower' if r < 1 else 'higher'}"
    up = _times(r) if m.better == "higher" else f"{_times(r)} higher"
    return up if r >= 1 else f"{_times(1 / r)} lower"


def verdict(m: Metric, base: float | None, cand: float | None) -> str | None:
    """'better' or 'worse' than ``base`` by the metric's own direction; None where
    ``change`` says 'same' or '-', or for a figure of the workload (``Metric.judged``)."""
    if not m.judged or change(m, base, cand) in ("same", "-"):
        return None
    assert base is not None and cand is not None
    return "better" if (cand > base) == (m.better == "higher") else "worse"


def change_phrase(m: Metric, base: float | None, cand: float | None) -> str | None:
    """'<label> <change>' ('P50 TTFT 46x lower', 'P50 TPOT same'); None when a side is
    missing."""
    c = change(m, base, cand)
    return None if c == "-" else f"{m.label} {c}"


def _value(m: Metric, s: dict[str, Any], block: str) -> float:
    v = m.value(s.get(block) or {})
    return math.nan if v is None else v


def comparison_values(summaries: Sequence[dict[str, Any]],
                      metrics: Sequence[str] | None = None, block: str = "overall",
                      labels: Sequence[str] | None = None) -> pd.DataFrame:
    """Numbers: one row per metric (index: metric name), one float column per run (its
    display name, ``run_labels`` unless ``labels`` names them), NaN where a run lacks the
    figure; rows no run has are left out. ``attrs`` holds each row's ``labels`` and
    ``units``."""
    labels = list(labels) if labels is not None else run_labels(summaries)
    names = list(metrics) if metrics is not None else comparison_metrics()
    data = {n: [_value(metric(n), s, block) for s in summaries] for n in names}
    df = pd.DataFrame.from_dict(data, orient="index", columns=labels, dtype="float64")
    df = df[~df.isna().all(axis=1)]
    df.index.name = "metric"
    df.attrs["labels"] = {n: metric(n).label for n in df.index}
    df.attrs["units"] = {n: ("%" if metric(n).share else metric(n).unit) for n in df.index}
    return df


def comparison_ratios(values: pd.DataFrame) -> pd.DataFrame:
    """Each run's value ÷ the first run's (floats; the first column is 1.0, NaN where the
    first run's value is 0 or missing)."""
    base = values.iloc[:, 0].where(values.iloc[:, 0] != 0)
    out = values.div(base, axis=0)
    out.attrs = dict(values.attrs)
    return out


def comparison_table(summaries: Sequence[dict[str, Any]],
                     metrics: Sequence[str] | None = None, block: str = "overall"
                     ) -> pd.DataFrame:
    """The formatted view: rows by metric label; each run's value, then each later run
    against the first ('vs <first>')."""
    values = comparison_values(summaries, metrics, block)
    return format_table(values)


def format_table(values: pd.DataFrame) -> pd.DataFrame:
    """Strings for ``comparison_values``: values with units, then changes vs the first."""
    labels = list(values.columns)
    rows, index = [], []
    for name, row in values.iterrows():
        m = metric(str(name))
        vals = [None if math.isnan(v) else float(v) for v in row]
        index.append(m.label)  # apart from the columns: a run may be named "metric"
        out: dict[str, str] = {}
        for lab, v in zip(labels, vals, strict=True):
            out[lab] = format_value(m, v)
        for lab, v in zip(labels[1:], vals[1:], strict=True):
            out[f"{lab} vs {labels[0]}"] = change(m, vals[0], v)
        rows.append(out)
    return pd.DataFrame(rows, index=pd.Index(index, name="metric")) if rows \
        else pd.DataFrame()


#: a headline of two runs with no figure in common (no successful measured request in one)
NO_COMMON_FIGURE = ("no headline figure is in both (no successful measured request in one "
                    "of them)")


def headline(base: dict[str, Any], cand: dict[str, Any],
             metrics: Sequence[str] = ("throughput", "ttft_p50", "e2e_p50", "hit_rate"),
             block: str = "overall") -> str:
    """One sentence of changes of ``cand`` against ``base``, published-results style."""
    parts = [change_phrase(metric(n), metric(n).value(base[block]),
                           metric(n).value(cand[block])) for n in metrics]
    return ", ".join(p for p in parts if p)
