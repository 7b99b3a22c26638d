"""Run the MoE frontier scenario (every variant, virtual time) and print its Markdown
table, as quoted in docs/simulator.md: one row per variant and concurrency point, the
AgentX headline figures (summary.json ``agentx``). Virtual time makes it deterministic:
the same command prints the same table, byte for byte, on any machine.

    python scripts/frontier_table.py scenarios/moe-frontier.yaml
"""

from __future__ import annotations

from pathlib import Path

from simtables import main, md, variant_runs


def table(path: Path) -> str:
    rows: list[list[str]] = []
    for name, _, _, s in variant_runs(path):
        for r in s["agentx"]:
            st = s["stages"][r["stage"]]
            rows.append([name, r["stage"], f"{st['load']['in_flight_mean']:,.1f}",
                         f"{r['total_tok_s_per_gpu']:,.0f}",
                         f"{r['interactivity_tok_s_p50']:,.1f}",
                         f"{r['ttft_ms_p50'] / 1e3:,.2f} s", f"{r['e2e_ms_p50'] / 1e3:,.1f} s",
                         f"{r['hit_rate_actual']:.1%}"])
    head = ["variant", "agents", "in flight", "tok/s per GPU", "tok/s per user", "P50 TTFT",
            "P50 E2E", "hit rate"]
    return "\n".join(md(head, rows))


if __name__ == "__main__":
    main(table, __doc__)
