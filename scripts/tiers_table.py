"""Run the KV tiers what-if (every variant, virtual time) and print its Markdown tables, as
quoted in docs/simulator.md: the figures a user reads per variant, then where the cached
tokens came from and what each tier loaded and stored (the simulator's counters over the
whole run, warmup included). Virtual time makes it deterministic: the same command prints
the same tables, byte for byte, on any machine.

    python scripts/tiers_table.py scenarios/kv-tiers.yaml
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from simtables import main, md, variant_runs

from agentbench.results.schema import SERVER_METRICS_FILE
from agentbench.sim.presets import get_preset

TIERS = ("gpu", "cpu", "nvme", "shared")


def _counters(metrics: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(family, tier) -> the sum over instances at the run's last sample ("" for a family
    without tiers)."""
    last = metrics[metrics["time_ns"] == metrics["time_ns"].max()]
    out: dict[tuple[str, str], float] = {}
    for name, labels, value in zip(last["name"], last["labels"], last["value"], strict=True):
        tier = dict(labels).get("tier", "")
        out[(name, tier)] = out.get((name, tier), 0.0) + float(value)
    return out


def _row(name: str, s: dict[str, Any]) -> list[str]:
    o = s["overall"]
    lat = o["latency"]
    return [name, f"{o['requests']['ok']:,}", f"{o['hit_rate']['usage']['value']:.1%}",
            f"{lat['ttft_ms']['p50'] / 1e3:,.2f} s", f"{lat['ttft_ms']['p99'] / 1e3:,.1f} s",
            f"{o['throughput']['per_gpu_total_tok_s']:,.0f}",
            f"{o['goodput']['requests']:.1%}",
            f"{o['time_breakdown']['mean_ms']['tier_load']:,.0f} ms"]


def _tiers(name: str, c: dict[tuple[str, str], float], kvb: float) -> list[str]:
    prompt = c[("vllm:prompt_tokens_total", "")]
    hits = [c.get(("agentbench_sim_prefix_cache_hits_by_tier_total", t), 0.0) for t in TIERS]
    cells = [name, " / ".join(f"{h / prompt:.1%}" for h in hits)]
    for t in TIERS[1:]:
        loaded = c.get(("agentbench_sim_prefix_cache_hits_by_tier_total", t), 0.0)
        secs = c.get(("agentbench_sim_tier_load_seconds_total", t))
        stored = c.get(("agentbench_sim_tier_stored_tokens_total", t))
        cells.append("-" if secs is None or stored is None else
                     f"{loaded * kvb / 1e9:,.0f} GB in {secs:,.1f} s; "
                     f"{stored * kvb / 1e9:,.0f} GB stored")
    return cells


def tables(path: Path) -> str:
    rows: list[list[str]] = []
    tiers: list[list[str]] = []
    for name, sc, rd, summary in variant_runs(path):
        rows.append(_row(name, summary))
        kvb = float(get_preset(sc.endpoints[0].preset).kv_bytes_per_token)
        tiers.append(_tiers(name, _counters(pd.read_parquet(rd / SERVER_METRICS_FILE)), kvb))
    lines = md(["variant", "requests", "hit rate", "P50 TTFT", "P99 TTFT", "tok/s per GPU",
                "goodput", "tier loads per request"], rows) + [""]
    lines += md(["variant", "prompt tokens from GPU / CPU / NVMe / shared",
                 "CPU: loaded; stored", "NVMe: loaded; stored", "shared: loaded; stored"],
                tiers)
    return "\n".join(lines)


if __name__ == "__main__":
    main(tables, __doc__)
