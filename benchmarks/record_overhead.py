"""What ``agentbench record`` adds to TTFT: the same streaming chat requests sent straight
to a server and through the recording proxy, interleaved, in one run.

Server: ``agentbench serve-sim --preset instant`` (every duration zero, so TTFT is the
HTTP path alone) in its own process; the proxy: ``agentbench record`` in its own process
(as an agent would run it); the client: aiohttp in this process. TTFT = first SSE event
with content - request sent. At each load (concurrent streams), requests alternate
direct / proxy; reported: p50 and p90 of each, the p50 difference (ms) and ratio, and the
median of the paired differences. The recording is checked to hold every proxied call.

    .venv/bin/python benchmarks/record_overhead.py [--requests 400] [--loads 1 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
AGENTBENCH = [sys.executable, "-m", "agentbench.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_up(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url + "/v1/models") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


async def ttft_ms(http: aiohttp.ClientSession, url: str, body: bytes) -> float:
    t0 = time.perf_counter_ns()
    async with http.post(url + "/v1/chat/completions", data=body,
                         headers={"Content-Type": "application/json"}) as r:
        first = None
        async for line in r.content:
            if first is None and line.startswith(b"data: {") and b'"content":"' in line \
                    and b'"content":""' not in line:
                first = time.perf_counter_ns()
        assert r.status == 200 and first is not None
    return (first - t0) / 1e6


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]


async def measure(sim: str, proxy: str, n: int, load: int) -> dict[str, float]:
    prompt = "Refactor the parser module and keep the tests green. " * 40
    body = json.dumps({"model": "sim", "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": 8, "ignore_eos": True, "stream": True}).encode()
    conn = aiohttp.TCPConnector(limit=0)
    direct: list[float] = []
    proxied: list[float] = []
    async with aiohttp.ClientSession(connector=conn) as http:
        for url in (sim, proxy):  # warm connections and caches
            await asyncio.gather(*(ttft_ms(http, url, body) for _ in range(load * 4)))

        async def lane() -> None:
            for _ in range(n // load // 2):
                direct.append(await ttft_ms(http, sim, body))
                proxied.append(await ttft_ms(http, proxy, body))

        await asyncio.gather(*(lane() for _ in range(load)))
    diffs = [p - d for p, d in zip(proxied, direct, strict=True)]
    return {"load": load, "requests": len(direct) + len(proxied),
            "direct_p50_ms": statistics.median(direct), "proxy_p50_ms": statistics.median(proxied),
            "direct_p90_ms": pct(direct, 0.9), "proxy_p90_ms": pct(proxied, 0.9),
            "added_p50_ms": statistics.median(proxied) - statistics.median(direct),
            "ratio_p50": statistics.median(proxied) / statistics.median(direct),
            "paired_diff_p50_ms": statistics.median(diffs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400, help="per load, both paths")
    ap.add_argument("--loads", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args()
    sim_port, proxy_port = free_port(), free_port()
    sim_url, proxy_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{proxy_port}"
    tmp = Path(tempfile.mkdtemp(prefix="record-bench-"))
    out = tmp / "bench.parquet"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([*AGENTBENCH, "serve-sim", "--port", str(sim_port), "--preset",
                               "instant"], env=env, stdout=subprocess.DEVNULL)]
    procs.append(subprocess.Popen([*AGENTBENCH, "record", "--upstream", sim_url + "/v1",
                                   "--listen", f"127.0.0.1:{proxy_port}", "-o", str(out)],
                                  env=env, stdout=subprocess.PIPE, text=True))
    rows = []
    try:
        asyncio.run(wait_up(sim_url))
        asyncio.run(wait_up(proxy_url))
        for load in args.loads:
            rows.append(asyncio.run(measure(sim_url, proxy_url, args.requests, load)))
    finally:
        procs[1].send_signal(signal.SIGINT)
        print(procs[1].communicate(timeout=60)[0].strip().splitlines()[-1])
        procs[0].send_signal(signal.SIGINT)
        procs[0].wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"{time.strftime('%Y-%m-%d')}")
    print("load  requests  direct p50/p90 ms  proxy p50/p90 ms  added p50 ms  ratio  "
          "paired diff p50 ms")
    for r in rows:
        print(f"{r['load']:>4}  {r['requests']:>8}  "
              f"{r['direct_p50_ms']:7.3f}/{r['direct_p90_ms']:<7.3f}"
              f"  {r['proxy_p50_ms']:7.3f}/{r['proxy_p90_ms']:<7.3f}  {r['added_p50_ms']:12.3f}"
              f"  {r['ratio_p50']:5.2f}  {r['paired_diff_p50_ms']:18.3f}")


if __name__ == "__main__":
    main()
