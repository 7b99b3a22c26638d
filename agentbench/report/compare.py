"""Side-by-side comparison of run summaries, with ratios against the first run in the form
published results use ("throughput 3.8x, P50 TTFT 46x lower, hit rate 1.7% → 92.2%").
Formats summaries only; nothing is recomputed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from agentbench.metrics.catalog import HEADLINE, METRICS, change_phrase, format_value


def run_labels(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Unique display names: the run ids, suffixed when two are equal."""
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


def comparison_table(summaries: Sequence[dict[str, Any]], metrics: Sequence[str] = HEADLINE,
                     block: str = "overall") -> pd.DataFrame:
    """Rows: metrics; columns: each run's value, then each later run vs the first."""
    labels = run_labels(summaries)
    rows = []
    for name in metrics:
        m = METRICS[name]
        vals = [m.value(s[block]) for s in summaries]
        if all(v is None for v in vals):
            continue
        row: dict[str, Any] = {"metric": m.label}
        for lab, v in zip(labels, vals, strict=True):
            row[lab] = format_value(m, v)
        for lab, v in zip(labels[1:], vals[1:], strict=True):
            phrase = change_phrase(m, vals[0], v)
            row[f"{lab} vs {labels[0]}"] = phrase[len(m.label) + 1:] if phrase else "-"
        rows.append(row)
    return pd.DataFrame(rows).set_index("metric") if rows else pd.DataFrame()


def headline(base: dict[str, Any], cand: dict[str, Any],
             metrics: Sequence[str] = ("throughput", "ttft_p50", "e2e_p50", "hit_rate"),
             block: str = "overall") -> str:
    """One sentence of changes of ``cand`` against ``base``, published-results style."""
    parts = [change_phrase(METRICS[n], METRICS[n].value(base[block]),
                           METRICS[n].value(cand[block])) for n in metrics]
    return ", ".join(p for p in parts if p)
