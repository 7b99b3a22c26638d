"""Run the prefill/decode split what-if (every variant, virtual time) and print its
Markdown tables, as quoted in docs/simulator.md: one row per variant and stage, then
where a request's time went in each variant (mean seconds per part, docs/metrics.md) and
what its KV link carried. Virtual time makes it deterministic: the same command prints
the same tables, byte for byte, on any machine.

    python scripts/pd_table.py scenarios/pd-ratio.yaml
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from simtables import main, md, variant_runs

from agentbench.results.schema import REQUESTS_FILE, SERVER_METRICS_FILE
from agentbench.sim.timeline import PARTS

TRANSFER = "agentbench_sim_kv_transfer_"


def itl_tail(requests: pd.DataFrame, stage: str, q: float) -> float:
    """The ``q`` quantile (0-100) of the gaps between a stage's measured successful
    requests' token events, ms (the ITL of docs/metrics.md, at a finer quantile than the
    summary keeps)."""
    rows = requests[(requests["stage"] == stage) & (requests["phase"] == "measure")
                    & (requests["status"] == "ok")]
    gaps = [np.diff(np.asarray(ev, dtype=np.int64)) for ev in rows["token_event_ns"]
            if ev is not None and len(ev) > 1]
    return float(np.percentile(np.concatenate(gaps), q)) / 1e6 if gaps else float("nan")


def _rows(name: str, sc: Any, s: dict[str, Any], requests: pd.DataFrame) -> list[list[str]]:
    out = []
    for label, st in s["stages"].items():
        lat, thr = st["latency"], st["throughput"]
        inter = st["interactivity_tok_s"]["p50"]
        out.append([name, label, f"{st['requests']['ok']:,}",
                    f"{st['hit_rate']['usage']['value']:.1%}",
                    f"{lat['ttft_ms']['p50'] / 1e3:,.2f} s",
                    f"{lat['ttft_ms']['p99'] / 1e3:,.1f} s",
                    f"{lat['itl_ms']['p99']:,.1f} ms",
                    f"{itl_tail(requests, label, 99.9):,.0f} ms",
                    f"{thr['per_gpu_total_tok_s']:,.0f}",
                    f"{inter:,.1f}", f"{st['goodput']['requests']:.1%}"])
    return out


def _where(name: str, s: dict[str, Any], metrics: pd.DataFrame) -> list[str]:
    """Where a request's time went (means over the run, s) and what the link carried
    (totals at the run's last sample)."""
    tb = s["overall"]["time_breakdown"]["mean_ms"]
    row = [name, *(f"{tb[p] / 1e3:,.2f}" for p in PARTS)]
    m = metrics[metrics["name"].str.startswith(TRANSFER)]
    if m.empty:
        return [*row, "-"]
    last = m[m["time_ns"] == m["time_ns"].max()].groupby("name")["value"].sum()
    gb = last[TRANSFER + "bytes_total"] / 1e9
    return [*row, f"{gb:,.0f} GB ({last[TRANSFER + 'tokens_total'] / 1e6:,.1f}M tokens)"]


def tables(path: Path) -> str:
    rows: list[list[str]] = []
    where: list[list[str]] = []
    for name, sc, rd, summary in variant_runs(path):
        rows += _rows(name, sc, summary, pd.read_parquet(rd / REQUESTS_FILE))
        where.append(_where(name, summary, pd.read_parquet(rd / SERVER_METRICS_FILE)))
    head = ["variant", "stage", "requests", "hit rate", "P50 TTFT", "P99 TTFT", "P99 ITL",
            "P99.9 ITL", "tok/s per GPU", "tok/s per user", "goodput"]
    lines = md(head, rows) + [""]
    lines += md(["variant", *(f"{p.replace('_', ' ')} (s)" for p in PARTS), "KV moved"], where)
    return "\n".join(lines)


if __name__ == "__main__":
    main(tables, __doc__)
