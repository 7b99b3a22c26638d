"""What sending the load from Ray actors costs next to ``--workers`` on one host.

Against agentbench's fast server (one write per SSE event), the same closed-loop scenario
runs: in one process, in ``--workers 2`` processes, and from Ray load workers on a local
Ray cluster (two nodes of one CPU each; ``agentbench.replay.raylanes``). For each:
requests/s and streamed events/s over the stage, schedule lag p50/p99 (how late the
client sent), and the ratio to ``--workers 2`` measured in the same run. Then the round
trip a Ray worker pays for each tree it draws from the coordinator (p50/p99 of 300).

On a 2-core host the server shares the cores with the client: the figures say what the
Ray path costs relative to the processes path, not what a node can push.

    .venv/bin/python benchmarks/ray_load_bench.py [--requests 3000] [--lanes 32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIO = """
name: {name}
seed: 1
endpoints: [{{kind: openai, url: '{url}', model: m, ignore_eos: true}}]
trace: {{kind: synth, profile: codex, sessions: 64, transform: {{scale: 0.02}}}}
load: {{kind: lanes, concurrency: {lanes}}}
timing: {{time_scale: 0.0, idle_cap_s: null}}
limits: {{max_requests: {requests}, recycle: true}}
output: {{dir: '{out}'}}
server_metrics: {{enabled: false}}
"""


def server(tokens: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "agentbench.testing.fastserver", "--port",
                             "0", "--tokens", str(tokens), "--per-event"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def one(name: str, url: str, out: Path, args: argparse.Namespace, **kw: Any) -> dict[str, Any]:
    import agentbench
    from agentbench.experiment import run_experiment

    path = out / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, url=url, lanes=args.lanes,
                                    requests=args.requests, out=out))
    t = time.perf_counter()
    run = run_experiment(path, **kw).runs[0]
    wall = time.perf_counter() - t
    info = json.loads((run.run_dir / "run.json").read_text())
    df = agentbench.load(run.run_dir).requests
    st = info["stages"][0]
    window = (st["end_ns"] - st["profile_start_ns"]) / 1e9
    lag = df["schedule_lag_ms"].dropna().to_numpy()
    return {"name": name, "workers": info["workers"], "requests": len(df),
            "requests_per_s": len(df) / window, "events_per_s": df["token_events"].sum() / window,
            "lag_p50_ms": float(np.percentile(lag, 50)),
            "lag_p99_ms": float(np.percentile(lag, 99)),
            "wall_s": wall,
            "cpu_ms_per_request": (1e3 * sum(info["workers_cpu_s"]) / len(df)
                                   if info.get("workers_cpu_s") else None)}


def round_trips(ray: Any, n: int = 300) -> list[float]:
    from agentbench.replay.raynode import Coordinator

    coord = ray.remote(Coordinator).options(num_cpus=0).remote(64, True, 2)
    ray.get(coord.tree.remote("restart"))
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        ray.get(coord.tree.remote("next", None))
        out.append((time.perf_counter_ns() - t) / 1e6)
    ray.kill(coord)
    return out


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--lanes", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64, help="SSE events per answer")
    args = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    proc, url = server(args.tokens)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            rows.append(one("one-process", url, out, args))
            rows.append(one("workers-2", url, out, args, workers=2))
            rows.append(one("ray-2-nodes", url, out, args, ray=cluster.address))
            rtt = round_trips(ray)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        proc.terminate()
        proc.wait(10)
    ref = rows[1]
    print(f"{args.requests} requests, {args.lanes} lanes, {args.tokens} events each, "
          "fast server on this host")
    print(f"{'client':<13} {'workers':>7} {'req/s':>8} {'events/s':>9} {'lag p50':>8} "
          f"{'lag p99':>8} {'CPU/request':>11} {'events/s vs workers-2':>22}")
    for r in rows:
        print(f"{r['name']:<13} {r['workers']:>7} {r['requests_per_s']:>8,.0f} "
              f"{r['events_per_s']:>9,.0f} {r['lag_p50_ms']:>6.2f}ms {r['lag_p99_ms']:>6.2f}ms "
              f"{_ms(r['cpu_ms_per_request']):>11} "
              f"{r['events_per_s'] / ref['events_per_s']:>21.2f}x")
    q = statistics.quantiles(rtt, n=100)
    print(f"tree draw from the coordinator (one round trip): p50 {statistics.median(rtt):.2f} "
          f"ms, p99 {q[98]:.2f} ms over {len(rtt)}")


if __name__ == "__main__":
    main()
