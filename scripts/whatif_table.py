"""Run a simulated what-if scenario (every variant, virtual time) and print its Markdown
table, as quoted in the README. Virtual time makes it deterministic: the same command
prints the same table, byte for byte, on any machine.

    python scripts/whatif_table.py scenarios/shared-kv-what-if.yaml
    python scripts/whatif_table.py scenarios/scale-out.yaml
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simtables import main, md, variant_runs


def _row(name: str, sc: Any, s: dict[str, Any]) -> list[str]:
    o = s["overall"]
    lat, hit, thr = o["latency"], o["hit_rate"], o["throughput"]
    usage = hit["usage"]["value"]
    pot = hit["potential"]["value"]
    cost = o["cost"].get("per_mtok_total_usd")
    return [name, f"{sc.hardware.gpus:g}", f"{sc.load.concurrency}",
            f"{o['requests']['ok']:,}",
            f"{usage:.1%} ({pot:.1%})",
            f"{lat['ttft_ms']['p50'] / 1e3:,.2f} s", f"{lat['e2e_ms']['p50'] / 1e3:,.1f} s",
            f"{thr['total_tok_s']:,.0f} tok/s", f"{thr['per_gpu_total_tok_s']:,.0f}",
            "-" if cost is None else f"${cost:.3f}"]


def table(path: Path) -> str:
    head = ["variant", "GPUs", "agents", "requests", "hit rate (potential)", "P50 TTFT",
            "P50 E2E", "throughput", "per GPU", "self-hosted $/Mtok"]
    return "\n".join(md(head, [_row(name, sc, s) for name, sc, _, s in variant_runs(path)]))


if __name__ == "__main__":
    main(table, __doc__)
