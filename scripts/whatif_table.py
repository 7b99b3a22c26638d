"""Run a simulated what-if scenario (every variant, virtual time) and print its Markdown
table, as quoted in the README. Virtual time makes it deterministic: the same command
prints the same table, byte for byte, on any machine.

    python scripts/whatif_table.py scenarios/shared-kv-what-if.yaml
    python scripts/whatif_table.py scenarios/scale-out.yaml
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentbench.metrics import summarize  # noqa: E402
from agentbench.replay import run  # noqa: E402
from agentbench.scenario.loading import expand_variants, load_scenario  # noqa: E402


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
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sc in expand_variants(load_scenario(path)):
            if sc.clock_mode != "virtual":
                raise SystemExit(f"{path}: {sc.name} is not in virtual time")
            sc.output.dir, sc.output.run_id = tmp, sc.name
            rows.append(_row(sc.name.removeprefix(f"{load_scenario(path).name}-"), sc,
                             summarize(run(sc, progress=False).run_dir, write=False)))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", type=Path)
    print(table(ap.parse_args().scenario))


if __name__ == "__main__":
    main()
