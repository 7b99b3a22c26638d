"""Benchmarks of the serving simulator.

    python benchmarks/sim_bench.py            # scheduling work, hashing, HTTP (one core)
    python benchmarks/sim_bench.py --what-if  # + the shared-KV what-if on real Weka traces
    python benchmarks/sim_bench.py --replay   # + whole scenarios in virtual time

1. Scheduling work: agentic sessions (growing shared prefixes) on 4 instances, run on a
   virtual clock (``speedup`` infinite): routing, prefix matching, block reservation,
   continuous-batching steps, token emission, eviction. Figure: simulated requests per
   CPU second. Prompts are pre-hashed so this isolates the engine. Steps that add or finish
   a request are planned one by one; the decode-only steps between them are computed
   ahead as one run (``agentbench/sim/decoderuns.py``), and the prefix cache works per
   run of blocks (``kvcache``), so the cost is per request and per run more than per token
   or block. Three workloads are printed (many short agents, long contexts with small
   batches, cache thrash), each with how many simulated seconds it runs per CPU second: the
   largest ``speedup`` that the 4 simulated instances could be driven at in real time.
2. Prompt cost: tokenizing + hashing a chat request whose context grew by one turn.
3. HTTP: requests/s through the aiohttp server (instant preset, small prompts).
4. --replay: the shipped simulated scenarios through the replay and the in-process
   simulator on the virtual clock, as ``agentbench run`` does them (see
   ``benchmarks/virtual_bench.py``): simulated requests per CPU second, end to end.
5. --what-if: a few real Claude Code sessions (Weka traces) replayed turn by turn over
   HTTP against 4 instances: round robin with local caches only, with a shared tier, and
   with session affinity. Figures are simulated (h200-llama3-70b preset).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentbench.scenario.model import SharedTier, SimulatedEndpoint  # noqa: E402
from agentbench.sim.cluster import Cluster  # noqa: E402
from agentbench.sim.virtual import run_virtual  # noqa: E402
from agentbench.traces.words import block_text  # noqa: E402


def bench_scheduling(sessions: int = 16, turns: int = 40, out_tokens: int = 250,
                     first: tuple[int, int] = (10_000, 30_000),
                     growth: tuple[int, int] = (300, 3000),
                     think: tuple[float, float] = (5.0, 30.0), instances: int = 4,
                     seed: int = 0) -> dict[str, float]:
    """Simulated requests/s of engine work on a virtual clock (prompts hashed beforehand)."""
    import numpy as np

    cfg = SimulatedEndpoint(kind="simulated", preset="h200-llama3-70b", instances=instances,
                            router="session_affinity")
    cl = Cluster(cfg)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    sched = []
    for s in range(sessions):
        n = rng.randint(*first)  # system prompt + tools + first user turn
        context = nrng.integers(0, 100_000, size=n + turns * growth[1])
        t = rng.uniform(0, 300)
        for _ in range(turns):
            toks = cl.hasher.id_tokens(context[:n])
            sched.append((t, cl.make_request(toks, max_tokens=out_tokens, ignore_eos=True,
                                             session=f"s{s}")))
            n += rng.randint(*growth)
            t += rng.uniform(*think)
    n = len(sched)
    ctx = statistics.mean(r.prompt_tokens for _, r in sched)
    t0, c0 = time.perf_counter(), time.process_time()
    done = run_virtual(cl, sched)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0  # this process's CPU time: steadier on a shared machine
    assert len(done) == n
    prompt = sum(r.prompt_tokens for r in done)
    cached = sum(r.cached_tokens for r in done)
    busy = sum(i.stats.busy_s for i in cl.instances)
    return {"requests": n, "mean_prompt_tokens": ctx, "wall_s": wall, "cpu_s": cpu,
            "mean_batch": sum(r.output_tokens for r in done) / max(1, sum(
                i.stats.steps for i in cl.instances)),
            "simulated_s": max(r.finished_at or 0.0 for r in done), "busy_s": busy,
            "requests_per_s": n / cpu, "steps": sum(i.stats.steps for i in cl.instances),
            "hit_rate": cached / prompt}


def bench_prompt(context_tokens: int = 100_000, turns: int = 20) -> dict[str, float]:
    """Per-request cost of tokenizing + hashing a growing single-message chat context."""
    cl = Cluster(SimulatedEndpoint(kind="simulated", preset="instant"))
    blocks = context_tokens // 64
    text = "".join(block_text(1, h, 64) for h in range(blocks))
    cl.hasher.block_hashes(cl.hasher.chat_tokens([("user", text)]))  # first turn (cold)
    t0 = time.perf_counter()
    for k in range(turns):
        text += block_text(2, k, 64) * 12
        cl.hasher.block_hashes(cl.hasher.chat_tokens([("user", text)]))
    return {"context_tokens": context_tokens, "ms_per_request":
            (time.perf_counter() - t0) / turns * 1e3}


async def bench_http(requests: int = 2000, concurrency: int = 32,
                     in_process: bool = True) -> dict[str, float]:
    import aiohttp

    from agentbench.sim import start_simulator

    cfg = SimulatedEndpoint(kind="simulated", preset="instant", instances=4,
                            router="least_loaded")
    h = await (start_simulator(cfg, in_process=True) if in_process else start_simulator(cfg))
    body = {"model": "sim", "max_tokens": 16, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    left = list(range(requests))
    try:
        async with aiohttp.ClientSession(base_url=h.url) as s:
            async def worker() -> None:
                while left:
                    i = left.pop()
                    b = {**body, "messages": [{"role": "user", "content":
                                               block_text(3, i % 50, 200)}]}
                    async with s.post("/v1/chat/completions", json=b) as r:
                        await r.read()

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            wall = time.perf_counter() - t0
    finally:
        await h.close()
    note = "client and server share one process and core" if in_process else \
        "server in its own process (the default)"
    return {"requests": requests, "requests_per_s": requests / wall,
            "note": note}  # type: ignore[dict-item]


# ------------------------------------------------------------------ what-if


def pick_weka_sessions(n: int, max_input: int) -> list[Any]:
    from agentbench.traces.readers import read_trace

    trace = read_trace(str(ROOT.parent / "shared" / "traces" / "claude-code-weka"),
                       format="weka")
    roots = [s for s in trace.sessions if s.parent_id is None and len(s.turns) >= 10
             and max(t.input_tokens for t in s.turns) <= max_input]
    roots.sort(key=lambda s: s.session_id)
    return roots[:n]


def turn_content(turn: Any, salt: int, memo: dict[tuple[int, int], str]) -> str:
    """One user message of the turn's blocks whose chat prompt is exactly input_tokens
    (``memo`` keeps block texts: making one costs tens of microseconds)."""
    budget = max(0, turn.input_tokens - 3)
    parts = []
    for h in turn.hash_ids.tolist():
        k = min(turn.block_size, budget)
        if k <= 0:
            break
        text = memo.get((h, k))
        if text is None:
            text = memo[(h, k)] = block_text(salt, int(h), k)
        parts.append(text)
        budget -= k
    if budget > 0:
        parts.append(block_text(salt ^ 0x5EED, turn.turn, budget))
    return "".join(parts)


async def what_if_run(label: str, cfg: SimulatedEndpoint, sessions: list[Any],
                      turns: int) -> dict[str, Any]:
    """Replay each session's first ``turns`` turns in order (all sessions concurrently,
    no think time) over HTTP; return hit rate, potential and TTFT percentiles (simulated)."""
    import aiohttp

    from agentbench.sim import SESSION_HEADER, start_simulator
    from agentbench.traces.stats import potential_cached_tokens

    h = await start_simulator(cfg, in_process=True)
    h.cluster.finished_log = log = []
    ttfts: list[float] = []
    prompt = cached = potential = 0
    pot = potential_cached_tokens(sessions)  # one hash scope per trace: no cross-talk
    try:
        async with aiohttp.ClientSession(base_url=h.url) as http:
            async def agent(idx: int, s: Any) -> None:
                nonlocal prompt, cached, potential
                memo: dict[tuple[int, int], str] = {}
                for turn in s.turns[:turns]:
                    body = {"model": cfg.model, "max_tokens": max(1, min(turn.output_tokens,
                                                                         400)),
                            "ignore_eos": True, "stream": True,
                            "stream_options": {"include_usage": True},
                            "messages": [{"role": "user",
                                          "content": turn_content(turn, 1000 + idx, memo)}]}
                    t0 = time.perf_counter()
                    first = None
                    usage = None
                    async with http.post("/v1/chat/completions", json=body,
                                         headers={SESSION_HEADER: s.session_id}) as r:
                        async for raw in r.content:
                            if first is None and b'"content":"' in raw and b'"content":""' \
                                    not in raw:
                                first = time.perf_counter()
                            if b'"usage"' in raw:
                                import json

                                usage = json.loads(raw[6:])["usage"]
                    assert usage is not None and first is not None
                    ttfts.append((first - t0) * cfg.speedup)
                    prompt += usage["prompt_tokens"]
                    cached += usage["prompt_tokens_details"]["cached_tokens"]
                    potential += pot[(s.session_id, turn.turn)]

            t0 = time.perf_counter()
            await asyncio.gather(*(agent(i, s) for i, s in enumerate(sessions)))
            wall = time.perf_counter() - t0
    finally:
        await h.close()
    q = statistics.quantiles(ttfts, n=100)
    server = [r.first_token_at - r.arrival for r in log]  # simulated seconds, no HTTP
    return {"config": label, "requests": len(ttfts), "hit_rate": cached / prompt,
            "potential_hit_rate": potential / prompt, "ttft_p50_s": statistics.median(ttfts),
            "ttft_p90_s": q[89], "server_ttft_p50_s": statistics.median(server),
            "server_ttft_p90_s": statistics.quantiles(server, n=100)[89], "wall_s": wall,
            "evictions": sum(i.gpu.evictions for i in h.cluster.instances)}


async def what_if(n_sessions: int = 4, turns: int = 30, speedup: float = 50.0,
                  max_input: int = 150_000) -> list[dict[str, Any]]:
    sessions = pick_weka_sessions(n_sessions, max_input)
    base = {"kind": "simulated", "preset": "h200-llama3-70b", "instances": 4,
            "speedup": speedup}
    configs = [
        ("round_robin, local caches", SimulatedEndpoint.model_validate(
            {**base, "router": "round_robin"})),
        ("round_robin + shared tier", SimulatedEndpoint.model_validate(
            {**base, "router": "round_robin",
             "shared_tier": SharedTier(capacity_blocks=2_000_000)})),
        ("session_affinity, local caches", SimulatedEndpoint.model_validate(
            {**base, "router": "session_affinity"})),
    ]
    return [await what_if_run(label, cfg, sessions, turns) for label, cfg in configs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what-if", action="store_true", help="also run the Weka what-if")
    ap.add_argument("--only-what-if", action="store_true", help="run only the what-if")
    ap.add_argument("--sessions", type=int, default=4, help="what-if: Weka sessions")
    ap.add_argument("--turns", type=int, default=30, help="what-if: turns per session")
    ap.add_argument("--speedup", type=float, default=50.0, help="what-if: speedup")
    ap.add_argument("--replay", action="store_true",
                    help="also the shipped scenarios in virtual time")
    args = ap.parse_args()
    if not args.only_what_if:
        run_benches()
    if args.replay:
        import tempfile

        from virtual_bench import scenario_runs

        print("virtual-time replay (whole scenarios, one process):")
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("quickstart.yaml", "shared-kv-what-if.yaml"):
                scenario_runs(ROOT / "scenarios" / name, Path(tmp))
    if args.what_if or args.only_what_if:
        rows = asyncio.run(what_if(args.sessions, args.turns, args.speedup))
        print("what-if (simulated h200-llama3-70b, 4 instances, TTFT in simulated seconds):")
        for r in rows:
            print(f"  {r['config']:<32} requests {r['requests']:>4}  hit rate "
                  f"{r['hit_rate']:6.1%} (potential {r['potential_hit_rate']:.1%})  "
                  f"TTFT p50 {r['ttft_p50_s']:6.2f} s p90 {r['ttft_p90_s']:6.2f} s (client); "
                  f"p50 {r['server_ttft_p50_s']:6.2f} s p90 {r['server_ttft_p90_s']:6.2f} s "
                  f"(server); evicted {r['evictions']:,} blocks; wall {r['wall_s']:.1f} s")


WORKLOADS = {
    "agentic, 64 agents on 4 instances": dict(sessions=64, turns=20, first=(2000, 10000),
                                              growth=(300, 1500), think=(1.0, 5.0)),
    "long contexts, 16 agents on 4 instances": dict(),
    "cache thrash, 100 agents, 60 out tokens": dict(sessions=100, turns=20, out_tokens=60),
}


def run_benches() -> None:
    print("scheduling work (virtual clock, per CPU second of one core, prompts pre-hashed, "
          "h200-llama3-70b, session affinity, 250 output tokens unless noted):")
    for label, kw in WORKLOADS.items():
        s = bench_scheduling(**kw)  # type: ignore[arg-type]
        print(f"  {label:<40} {s['requests']:>5,} requests, mean prompt "
              f"{s['mean_prompt_tokens']:>6,.0f} tok, hit {s['hit_rate']:5.1%}, mean batch "
              f"{s['mean_batch']:4.1f}: {s['requests_per_s']:>6,.0f} simulated requests/s; "
              f"{s['simulated_s'] / s['cpu_s']:>6,.0f} simulated s per CPU s")
    p = bench_prompt()
    print(f"prompt: tokenize + hash a {p['context_tokens']:,}-token chat context grown by one "
          f"turn: {p['ms_per_request']:.2f} ms/request")
    for in_process in (True, False):
        hb = asyncio.run(bench_http(in_process=in_process))
        print(f"http: {hb['requests']:,} streamed chat requests (16 tokens) = "
              f"{hb['requests_per_s']:,.0f} requests/s ({hb['note']})")


if __name__ == "__main__":
    main()
