"""Run the MoE frontier scenario (every variant, virtual time) and print its Markdown
table, as quoted in docs/simulator.md: one row per variant and concurrency point, the
AgentX headline figures (summary.json ``agentx``). Virtual time makes it deterministic:
the same command prints the same table, byte for byte, on any machine.

    python scripts/frontier_table.py scenarios/moe-frontier.yaml
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentbench.metrics import summarize  # noqa: E402
from agentbench.replay import run  # noqa: E402
from agentbench.scenario.loading import expand_variants, load_scenario  # noqa: E402


def table(path: Path) -> str:
    base = load_scenario(path)
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sc in expand_variants(base):
            if sc.clock_mode != "virtual":
                raise SystemExit(f"{path}: {sc.name} is not in virtual time")
            sc.output.dir, sc.output.run_id = tmp, sc.name
            s = summarize(run(sc, progress=False).run_dir, write=False)
            name = sc.name.removeprefix(f"{base.name}-")
            for r in s["agentx"]:
                st = s["stages"][r["stage"]]
                rows.append([name, r["stage"], f"{st['load']['in_flight_mean']:,.1f}",
                             f"{r['total_tok_s_per_gpu']:,.0f}",
                             f"{r['interactivity_tok_s_p50']:,.1f}",
                             f"{r['ttft_ms_p50'] / 1e3:,.2f} s",
                             f"{r['e2e_ms_p50'] / 1e3:,.1f} s",
                             f"{r['hit_rate_actual']:.1%}"])
    head = ["variant", "agents", "in flight", "tok/s per GPU", "tok/s per user", "P50 TTFT",
            "P50 E2E", "hit rate"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", type=Path)
    print(table(ap.parse_args().scenario))


if __name__ == "__main__":
    main()
