"""Headline figures over repeated runs of one scenario, with confidence intervals
(``agentbench run --repeat N``; docs/metrics.md, "Repeated runs").

Each figure's mean over the runs and the 95% interval of that mean from Student's t with
N - 1 degrees of freedom (the runs as the unit: a run's host, warm-up and scheduling
noise are in the spread, which per-request or per-tree intervals within one run cannot
see). With fewer than two runs there is no interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agentbench.metrics.catalog import METRICS

#: the figures summarised over repeats
FIGURES = ("throughput", "throughput_per_gpu", "ttft_p50", "ttft_p90", "e2e_p50",
           "tpot_p50", "hit_rate", "goodput", "agent_goodput")
#: two-sided 97.5% quantiles of Student's t, by degrees of freedom (1-30); normal beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201,
         2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
         2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.960


def interval(values: list[float]) -> dict[str, Any]:
    """``{n, mean, sd, ci95_low, ci95_high, rel_half_width}`` of ``values``."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None}
    # equal values are their own mean: sum / n may be an ulp off (386.231453 x 3 / 3),
    # which made identical runs' spread 7e-14, not 0, and hid why the interval is 0 wide
    mean = values[0] if min(values) == max(values) else sum(values) / n
    if n < 2:
        return {"n": n, "mean": mean}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci95_low": mean - half, "ci95_high": mean + half,
            "rel_half_width": half / abs(mean) if mean else None}


def repeat_table(summaries: list[dict[str, Any]], block: str = "overall"
                 ) -> dict[str, dict[str, Any]]:
    """Per figure of ``FIGURES``: its values over the runs and their interval."""
    out: dict[str, dict[str, Any]] = {}
    for name in FIGURES:
        m = METRICS.get(name)
        if m is None:
            continue
        vals = [v for s in summaries if (v := m.value(s.get(block) or {})) is not None]
        out[name] = {"values": vals, **interval(vals)}
    return out


def format_repeats(table: dict[str, dict[str, Any]]) -> list[str]:
    """One line per figure: mean, 95% interval, relative half-width."""
    lines = []
    for name, row in table.items():
        m = METRICS[name]
        if row.get("mean") is None:
            continue
        scale = 100.0 if m.share else 1.0
        unit = "%" if m.share else f" {m.unit}" if m.unit else ""
        mean = row["mean"] * scale
        lo = hi = mean
        if "ci95_low" in row:
            # every figure here is >= 0 and a share <= 100%: the interval is cut there
            lo = max(0.0, row["ci95_low"]) * scale
            hi = (min(1.0, row["ci95_high"]) if m.share else row["ci95_high"]) * scale
        # the interval to the mean's decimals ([92.6%, 93%] read as if the bounds were
        # known to different precision)
        num = _formatter(mean)
        text = f"  {m.label:<22} mean {num(mean)}{unit}"
        if "ci95_low" in row:
            rel = row.get("rel_half_width")
            text += (f"  95% CI [{num(lo)}{unit.strip() if m.share else ''}, "
                     f"{num(hi)}{unit}]" + (f"  ±{rel:.1%}" if rel is not None else ""))
        lines.append(text + f"  (n={row['n']})")
    if lines and all(row.get("sd") == 0 for row in table.values() if "sd" in row):
        lines.append("  the runs are identical (in virtual time a file trace replays the same "
                     "whatever the seed: repeats show spread on the wall clock, or with a "
                     "synthetic trace)")
    return lines


def _formatter(v: float) -> Callable[[float], str]:
    """Format numbers with the decimals that give ``v`` three significant digits (none
    from 100 up), thousands separated."""
    top = abs(v) if math.isfinite(v) else 0.0
    decimals = 0 if top == 0 or top >= 100 else min(9, 2 - math.floor(math.log10(top)))
    return lambda v: f"{v:,.{decimals}f}"
