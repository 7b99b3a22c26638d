"""How much the replay client costs, measured against an instant local server.

Prints, for agentbench's replay client against a server in a separate process that
answers at once (``../shared/tools/instant-server`` when nginx is installed, else
agentbench's lean ``fastserver`` sending the whole answer in one write):

- requests/s and streamed SSE chunks/s at 1, 64 and 256 lanes (closed loop, no think
  time, 128-token streams), client CPU seconds per 1,000 requests (the replay call
  all-in: setup, streaming, records, parquet files), schedule lag p50/p99;
- schedule lag p50/p99 at 256 lanes with think time (the client is not saturated, so the
  lag is the scheduler's own delay);
- peak RSS with 1,000 lanes at 142K-token contexts (every lane its own trace copy);
- the time to build a 142K-token chat turn: cold (every block new) and warm (the next
  turn of the session, two new blocks), body bytes included.

Every measured configuration runs in its own process. ``--quick`` shrinks the runs.

    .venv/bin/python benchmarks/client_bench.py [--quick] [--lanes 1 64 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
INSTANT = ROOT.parent / "shared" / "tools" / "instant-server"


# ---------------------------------------------------------------- server


class Server:
    """The instant server in its own process(es)."""

    def __init__(self, tokens: int, kind: str, per_event: bool) -> None:
        self.kind = kind
        self.proc: subprocess.Popen[str] | None = None
        self.tmp = tempfile.mkdtemp(prefix="ab-bench-srv-")
        if kind == "nginx":
            port = 18900 + os.getpid() % 500
            subprocess.run([str(INSTANT), "start", "--port", str(port), "--tokens",
                            str(tokens), "--dir", self.tmp], check=True, capture_output=True)
            self.url = f"http://127.0.0.1:{port}"
        else:
            cmd = [sys.executable, "-m", "agentbench.replay.fastserver", "--port", "0",
                   "--tokens", str(tokens)] + (["--per-event"] if per_event else [])
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()
            self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def stop(self) -> None:
        if self.kind == "nginx":
            subprocess.run([str(INSTANT), "stop", "--dir", self.tmp], capture_output=True)
        elif self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


def server_kind(requested: str) -> str:
    if requested != "auto":
        return requested
    return "nginx" if shutil.which("nginx") and INSTANT.exists() else "fast"


# ---------------------------------------------------------------- child runs


def synthetic_trace(roots: int, turns: int, context: int, block: int = 64,
                    think_mean_s: float = 0.0, seed: int = 0) -> Any:
    """Roots whose turn k re-sends turn k-1's blocks plus one new block; turn 0 has
    ``context`` tokens. Each root is its own hash scope (so its own trace copy's blocks)."""
    from agentbench.traces.model import Session, Trace, Turn

    rng = np.random.default_rng(seed)
    sessions = []
    for r in range(roots):
        ts = []
        for k in range(turns):
            n = context + k * block
            ids = np.arange(1, n // block + 1, dtype=np.int64)
            think = float(rng.exponential(think_mean_s)) if think_mean_s else 0.0
            ts.append(Turn(turn=k, t=float(k), think_s=think, api_s=None, input_tokens=n,
                           output_tokens=128, hash_ids=ids, block_size=block))
        sessions.append(Session(f"r{r}", None, "root", None, None, None, "bench", f"r{r}",
                                0.0, ts))
    return Trace(sessions, name="bench")


def child_run(url: str, lanes: int, requests: int, context: int, think_mean_s: float,
              out_dir: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from agentbench import records
    from agentbench.replay import run_scenario
    from agentbench.scenario import Scenario

    # 16 turns per tree (contexts grow by one block a turn), as many trees as needed
    turns = min(16, max(1, -(-requests // lanes)))
    trace = synthetic_trace(max(lanes, -(-requests // turns)), turns, context,
                            think_mean_s=think_mean_s)
    sc = Scenario.model_validate({
        "name": "bench",
        "endpoints": [{"kind": "openai", "url": url, "model": "m", "ignore_eos": True}],
        "trace": {"kind": "file", "source": "synthetic"},
        "load": {"kind": "lanes", "concurrency": lanes},
        "timing": {"time_scale": 1.0, "idle_cap_s": None},
        "limits": {"recycle": False, "max_requests": requests},
        "output": {"dir": out_dir, "run_id": f"c{lanes}"},
        "server_metrics": {"enabled": False},
    })
    c0 = time.process_time()
    res = asyncio.run(run_scenario(sc, trace=trace, progress=False))
    cpu = time.process_time() - c0
    t = pq.read_table(res.run_dir / records.REQUESTS_FILE,
                      columns=["status", "scheduled_ns", "sent_ns", "end_ns",
                               "token_events"]).to_pandas()
    ok = int((t.status == records.OK).sum())
    window_s = (t.end_ns.max() - t.sent_ns.min()) / 1e9
    lag = (t.sent_ns - t.scheduled_ns).to_numpy() / 1e6
    return {
        "lanes": lanes, "requests": len(t), "ok": ok, "window_s": window_s,
        "req_per_s": len(t) / window_s, "chunks_per_s": float(t.token_events.sum()) / window_s,
        "cpu_s": cpu, "cpu_s_per_1000": cpu / len(t) * 1000,
        "lag_p50_ms": float(np.percentile(lag, 50)), "lag_p99_ms": float(np.percentile(lag, 99)),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "health": res.info.get("client_health", {}),
    }


def child_build(context: int) -> dict[str, Any]:
    from agentbench.replay.prompts import (
        BlockCache,
        SessionPrompt,
        body_template,
        chat_overhead,
    )

    trace = synthetic_trace(1, 3, context)
    s = trace.sessions[0]
    cache = BlockCache("chat")
    tpl = body_template("chat", "m", {}, ignore_eos=True)
    memo = SessionPrompt(cache, 1, s.session_id, chat_overhead(), 0)
    t0 = time.perf_counter()
    body = tpl.render_fragments(memo.build(s.turns[0], s.turns[1]), 128)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(200):  # turn 1 again and again: two new blocks, the rest cached
        memo2 = SessionPrompt(cache, 1, s.session_id, chat_overhead(), 0)
        memo2.build(s.turns[0], s.turns[1])
        t0 = time.perf_counter()
        body = tpl.render_fragments(memo2.build(s.turns[1], s.turns[2]), 128)
        warm.append(time.perf_counter() - t0)
    return {"context_tokens": context, "body_bytes": len(body), "cold_ms": cold * 1e3,
            "warm_p50_ms": float(np.median(warm)) * 1e3,
            "warm_p99_ms": float(np.percentile(warm, 99)) * 1e3}


def spawn(args: list[str], timeout: float) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                         text=True, timeout=timeout, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke check)")
    ap.add_argument("--lanes", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--requests", type=int, default=None, help="requests per run")
    ap.add_argument("--context", type=int, default=1024,
                    help="prompt tokens of the throughput runs")
    ap.add_argument("--server", choices=["auto", "nginx", "fast"], default="auto")
    ap.add_argument("--per-event", action="store_true",
                    help="fastserver writes each SSE event separately")
    ap.add_argument("--rss-lanes", type=int, default=1000)
    ap.add_argument("--rss-context", type=int, default=142_000)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "run":
            url, lanes, reqs, ctx, think, out = rest
            res = child_run(url, int(lanes), int(reqs), int(ctx), float(think), out)
        else:
            res = child_build(int(rest[0]))
        print(json.dumps(res))
        return

    kind = server_kind(args.server)
    requests = args.requests or (400 if args.quick else 3000)
    out_dir = tempfile.mkdtemp(prefix="ab-bench-")
    srv = Server(128, kind, args.per_event)
    print(f"agentbench client benchmark, {time.strftime('%Y-%m-%d %H:%M:%S')}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; server: {kind}"
          f"{' per-event' if args.per_event else ''} ({srv.url}), 128-token streams, "
          f"{args.context}-token prompts")
    try:
        print(f"\n{'lanes':>6} {'requests':>9} {'req/s':>8} {'chunks/s':>10} "
              f"{'CPU s/1k req':>13} {'lag p50 ms':>11} {'lag p99 ms':>11}")
        for lanes in args.lanes:
            r = spawn(["run", srv.url, str(lanes), str(max(requests, lanes)),
                       str(args.context), "0", out_dir], 900)
            print(f"{lanes:>6} {r['requests']:>9,} {r['req_per_s']:>8,.0f} "
                  f"{r['chunks_per_s']:>10,.0f} {r['cpu_s_per_1000']:>13.2f} "
                  f"{r['lag_p50_ms']:>11.2f} {r['lag_p99_ms']:>11.2f}")
        lanes = max(args.lanes)
        think = 0.5
        r = spawn(["run", srv.url, str(lanes), str(max(requests, lanes)), str(args.context),
                   str(think), out_dir], 900)
        h = r["health"]
        print(f"\npaced: {lanes} lanes, think time exp(mean {think} s): "
              f"{r['req_per_s']:,.0f} req/s, schedule lag p50 {r['lag_p50_ms']:.2f} ms, "
              f"p99 {r['lag_p99_ms']:.2f} ms, CPU {r['cpu_s_per_1000']:.2f} s/1k req; "
              f"loop stalls >10 ms: {h.get('loop_stalls_over_10ms')} (max "
              f"{h.get('loop_stall_max_ms')} ms), GC pauses >10 ms: "
              f"{h.get('gc_pauses_over_10ms')}")
        if not args.skip_rss:
            n = 100 if args.quick else args.rss_lanes
            r = spawn(["run", srv.url, str(n), str(2 * n), str(args.rss_context), "0",
                       out_dir], 1800)
            print(f"\nmemory: {n} lanes x {args.rss_context:,}-token contexts (2 turns each, "
                  f"every lane its own copy): peak RSS {r['maxrss_mb']:,.0f} MB, "
                  f"{r['req_per_s']:,.1f} req/s, CPU {r['cpu_s_per_1000']:.1f} s/1k req")
        b = spawn(["build", str(args.rss_context)], 300)
        print(f"\nbuild a {b['context_tokens']:,}-token chat turn ({b['body_bytes'] / 1e6:.2f} MB "
              f"body): cold {b['cold_ms']:.1f} ms (every block new), warm p50 "
              f"{b['warm_p50_ms']:.3f} ms / p99 {b['warm_p99_ms']:.3f} ms (next turn)")
    finally:
        srv.stop()
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
