"""How long ``agentbench.metrics.summarize`` takes on a large results folder.

Writes a synthetic run (``agentbench.testing.demo``) of about 1M requests (3 sweep stages,
2 endpoints, token events per request as given), then times, in the same process:
- reference: reading requests.parquet alone (pyarrow), and sorting 1M float64 (numpy), so a
  reader can tell a slow machine from slow code;
- summarize(): every metric, per run / stage / endpoint / tree / turn / context bucket,
  writing summary.json. Best and median of ``--repeat`` runs. Target: ≤ 2 s at 1M rows.

    python benchmarks/metrics_bench.py [--requests 1000000] [--events 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from agentbench.metrics import summarize
from agentbench.results import schema as R
from agentbench.testing.demo import write_demo_run


def _best(fn, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(best, median) wall seconds of ``repeat`` calls."""
    return _timed(fn, repeat)[:2]


def _timed(fn, repeat: int) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """(best wall, median wall, best CPU) seconds of ``repeat`` calls. CPU time stays
    honest on a shared machine where wall time also counts other processes' turns."""
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), statistics.median(walls), min(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=8, help="token events per request")
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target-s", type=float, default=2.0)
    args = ap.parse_args()
    stages = (4, 16, 64)
    trees = max(1, args.requests // (args.turns * len(stages)))
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        d = write_demo_run(Path(tmp) / "bench", trees=trees, turns=args.turns,
                           concurrency=stages, endpoints=("a", "b"), events=args.events,
                           warmup=0)
        gen_s = time.perf_counter() - t
        meta = pq.read_metadata(d / R.REQUESTS_FILE)
        rows = meta.num_rows
        size_mb = (d / R.REQUESTS_FILE).stat().st_size / 1e6
        print(f"results: {rows:,} requests, {trees * len(stages):,} session trees, "
              f"{len(stages)} stages, 2 endpoints, ~{args.events} token events/request, "
              f"requests.parquet {size_mb:.0f} MB (written in {gen_s:.1f} s)")
        vals = np.random.default_rng(0).random(1_000_000)
        ref_read = _best(lambda: pq.read_table(d / R.REQUESTS_FILE), args.repeat)
        ref_sort = _best(lambda: np.sort(vals), args.repeat)
        print(f"reference: read requests.parquet {ref_read[0]:.3f} s (median "
              f"{ref_read[1]:.3f}); np.sort 1M float64 {ref_sort[0]:.3f} s "
              f"(median {ref_sort[1]:.3f})")
        best, med, cpu = _timed(lambda: summarize(d), args.repeat)
        per_m = best * 1e6 / rows
        verdict = "within" if per_m <= args.target_s else "OVER"
        print(f"summarize: best {best:.3f} s wall (median {med:.3f}), best {cpu:.3f} s CPU, "
              f"over {args.repeat} runs = {per_m:.2f} s wall per 1M requests ({verdict} the "
              f"{args.target_s:g} s target); {best / ref_read[0]:.1f}x the parquet read")
        try:
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"machine: {os.cpu_count()} CPUs, load average {load}")
        except OSError:
            pass


if __name__ == "__main__":
    main()
