"""Run the KV tiers what-if (every variant, virtual time) and print its Markdown tables, as
quoted in docs/simulator.md: the figures a user reads per variant, then where the cached
tokens came from and what each tier loaded and stored (the simulator's counters over the
whole run, warmup included). Virtual time makes it deterministic: the same command prints
the same tables, byte for byte, on any machine.

    python scripts/tiers_table.py scenarios/kv-tiers.yaml
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentbench.metrics import summarize  # noqa: E402
from agentbench.replay import run  # noqa: E402
from agentbench.results.schema import SERVER_METRICS_FILE  # noqa: E402
from agentbench.scenario.loading import expand_variants, load_scenario  # noqa: E402
from agentbench.sim.presets import get_preset  # noqa: E402

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


def _md(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *["| " + " | ".join(r) + " |" for r in rows]]


def tables(path: Path) -> str:
    base = load_scenario(path)
    rows: list[list[str]] = []
    tiers: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sc in expand_variants(base):
            if sc.clock_mode != "virtual":
                raise SystemExit(f"{path}: {sc.name} is not in virtual time")
            sc.output.dir, sc.output.run_id = tmp, sc.name
            rd = run(sc, progress=False).run_dir
            name = sc.name.removeprefix(f"{base.name}-")
            rows.append(_row(name, summarize(rd, write=False)))
            kvb = float(get_preset(sc.endpoints[0].preset).kv_bytes_per_token)
            tiers.append(_tiers(name, _counters(pd.read_parquet(rd / SERVER_METRICS_FILE)),
                                kvb))
    lines = _md(["variant", "requests", "hit rate", "P50 TTFT", "P99 TTFT", "tok/s per GPU",
                 "goodput", "tier loads per request"], rows) + [""]
    lines += _md(["variant", "prompt tokens from GPU / CPU / NVMe / shared",
                  "CPU: loaded; stored", "NVMe: loaded; stored", "shared: loaded; stored"],
                 tiers)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", type=Path)
    print(tables(ap.parse_args().scenario))


if __name__ == "__main__":
    main()
