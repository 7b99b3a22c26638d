"""agentbench next to AIPerf: the same Mooncake trace slice against the same engine.

Takes the first ``--requests`` requests of Mooncake's conversation trace, fits them to a
tiny model with agentbench's transform (truncate, then scale: 512-token blocks become
``512 x scale``), and writes the slice as Mooncake JSONL (timestamps scaled by
``--time-scale``). Each tool then replays that file at its timestamps against a freshly
started engine (so neither inherits the other's prefix cache), and the script prints both
tools' TTFT and E2E p50/p99 and throughput side by side, with the engine's own mean TTFT
(vLLM's histogram) for each run: a gap between the tools that the engine shows too is
the engine running differently, not a measurement disagreement.

AIPerf (PyPI ``aiperf``) lives in its own venv (``--aiperf``, default
``~/.cache/agentbench/aiperf-venv``; made with ``python -m venv`` + ``pip install aiperf``)
and gets the tiny model's own tokenizer folder, so both tools count the same tokens.

  python benchmarks/peer_compare.py                      # vLLM CPU (needs its venv)
  python benchmarks/peer_compare.py --engine llama-cpp   # llama-server
  python benchmarks/peer_compare.py --agentx              # AgentX rules (peer_agentx.py)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MOONCAKE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
MODEL = "tiny-llama"


def write_slice(n: int, max_context: int, scale: float, time_scale: float,
                out: Path) -> tuple[int, int]:
    """Scaled Mooncake slice as JSONL; return (requests, block size)."""
    from agentbench.traces.model import Trace
    from agentbench.traces.readers import read_trace
    from agentbench.traces.transform import scale as scale_trace
    from agentbench.traces.transform import truncate

    lines = []
    with MOONCAKE.open() as f:
        for line in f:
            if len(lines) == n:
                break
            lines.append(line)
    raw = out.with_suffix(".raw.jsonl")
    raw.write_text("".join(lines))
    tr: Trace = read_trace(str(raw), format="mooncake")
    tr = scale_trace(truncate(tr, max_context), scale)
    rows = []
    for s in sorted(tr.sessions, key=lambda s: (s.start_s, s.session_id)):
        for t in s.turns:
            rows.append({"timestamp": int(round((s.start_s + t.t) * 1000 * time_scale)),
                         "input_length": int(t.input_tokens),
                         "output_length": int(t.output_tokens),
                         "hash_ids": [int(h) for h in t.hash_ids]})
    rows.sort(key=lambda r: r["timestamp"])
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    block = tr.sessions[0].turns[0].block_size
    return len(rows), block


def server_cfg(engine: str, port: int) -> Any:
    from agentbench.scenario.model import Server

    if engine == "vllm":
        cmd = ("{python} -m agentbench.engines vllm --tiny 512x8 -- --host 127.0.0.1 "
               f"--port {port} --served-model-name {MODEL} --enable-prefix-caching "
               "--enable-prompt-tokens-details --dtype bfloat16 --max-model-len 4096 "
               "--block-size 32")
        return Server(command=cmd, env={"VLLM_CPU_KVCACHE_SPACE": "2"},
                      health_url=f"http://127.0.0.1:{port}/health", startup_timeout_s=600)
    cmd = ("{python} -m agentbench.engines llama-server --tiny 512x8 -- --host 127.0.0.1 "
           f"--port {port} -c 16384 -np 4 -t 2 --metrics")
    return Server(command=cmd, health_url=f"http://127.0.0.1:{port}/health",
                  startup_timeout_s=120)


def tokenizer_dir() -> Path:
    """The tiny HF model folder (its tokenizer is the vLLM model's own)."""
    from agentbench.engines.locate import cache_dir
    from agentbench.engines.models import TinyLlama, write_tiny_hf_llama

    shape = TinyLlama(dim=512, layers=8, heads=8, kv_heads=8, ff=1408)
    out = cache_dir() / "models" / f"tiny-hf-llama-{shape.tag()}"
    if not (out / "tokenizer.json").is_file():
        write_tiny_hf_llama(out, shape)
    return out


def cached_tokenizer(hf_home: Path) -> str:
    """Copy the tiny model's tokenizer into ``hf_home`` as hub repo ``agentbench/<MODEL>``
    (refs/main -> one snapshot); return the repo id."""
    import shutil

    repo = hf_home / "hub" / f"models--agentbench--{MODEL}"
    commit = "0" * 40
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "config.json"):
        shutil.copy2(tokenizer_dir() / name, snap / name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return f"agentbench/{MODEL}"


def engine_ttft(port: int) -> tuple[float, float] | None:
    """(sum s, count) of vLLM's own TTFT histogram; None for engines without one."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    tot = {"sum": 0.0, "count": 0.0}
    found = False
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            for k in tot:
                if smp.name == f"vllm:time_to_first_token_seconds_{k}":
                    tot[k] += smp.value
                    found = True
    return (tot["sum"], tot["count"]) if found else None


def run_agentbench(slice_path: Path, block: int, n: int, port: int, out: Path,
                   engine: str) -> dict[str, float]:
    from agentbench.metrics import summarize
    from agentbench.replay import run as replay_run
    from agentbench.scenario.loading import parse_scenario

    headers = {"Connection": "close"} if engine == "llama-cpp" else {}
    doc = {
        "name": "peer-agentbench",
        "endpoints": [{"kind": "openai", "name": engine, "url": f"http://127.0.0.1:{port}",
                       "api": "chat", "model": MODEL, "ignore_eos": True,
                       "headers": headers}],
        "trace": {"kind": "file", "source": str(slice_path), "format": "mooncake",
                  "options": {"block_size": block}},
        "load": {"kind": "rate", "arrival": "trace"},
        "timing": {"strategy": "original", "time_scale": 1.0, "idle_cap_s": None},
        "limits": {"max_requests": n, "recycle": False},
        "output": {"dir": str(out), "run_id": "agentbench"},
    }
    sc = parse_scenario(json.dumps(doc))
    res = replay_run(sc, progress=False)
    s = summarize(res.run_dir)["overall"]
    lat, thr, req = s["latency"], s["throughput"], s["requests"]
    return {"requests": req["total"], "ok": req["ok"],
            "ttft_p50_ms": lat["ttft_ms"]["p50"], "ttft_p99_ms": lat["ttft_ms"]["p99"],
            "ttft_mean_ms": lat["ttft_ms"]["mean"],
            "e2e_p50_ms": lat["e2e_ms"]["p50"], "e2e_p99_ms": lat["e2e_ms"]["p99"],
            "output_tok_s": thr["output_tok_s"], "requests_per_s": thr["requests_per_s"]}


def run_aiperf(aiperf: Path, slice_path: Path, block: int, port: int, out: Path,
               engine: str) -> dict[str, float]:
    art = out / "aiperf"
    cmd = [str(aiperf), "profile", "-m", MODEL, "--url", f"http://127.0.0.1:{port}",
           "--endpoint-type", "chat", "--streaming", "--input-file", str(slice_path),
           "--custom-dataset-type", "mooncake_trace", "--fixed-schedule",
           "--isl-block-size", str(block), "--tokenizer", cached_tokenizer(out / "hf-home"),
           "--use-server-token-count", "--extra-inputs", "ignore_eos:true",
           "--artifact-dir", str(art), "--random-seed", "0", "--ui-type", "none"]
    if engine == "llama-cpp":
        cmd += ["--connection-reuse-strategy", "never"]
    # AIPerf's dataset workers force HF_HUB_OFFLINE=1 and then resolve the tokenizer in
    # the hub cache only (a local folder fails there), so the tiny model's tokenizer is
    # laid out as a cached hub repo in a private HF_HOME
    env = {**os.environ, "HF_HOME": str(out / "hf-home"), "HF_HUB_OFFLINE": "1"}
    log = out / "aiperf.log"
    with log.open("w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                            timeout=1800).returncode
    if rc:
        raise SystemExit(f"aiperf failed ({rc}); see {log}")
    data = json.loads(next(art.rglob("profile_export_aiperf.json")).read_text())

    def m(name: str, stat: str) -> float:
        v = data[name]
        return float(v[stat]) if isinstance(v, dict) else float(v)

    req = m("request_count", "avg")
    err = float(data.get("error_request_count", {}).get("avg", 0) or 0)
    return {"requests": req + err, "ok": req,
            "ttft_p50_ms": m("time_to_first_token", "p50"),
            "ttft_p99_ms": m("time_to_first_token", "p99"),
            "ttft_mean_ms": m("time_to_first_token", "avg"),
            "e2e_p50_ms": m("request_latency", "p50"),
            "e2e_p99_ms": m("request_latency", "p99"),
            "output_tok_s": m("output_token_throughput", "avg"),
            "requests_per_s": m("request_throughput", "avg")}


def main() -> int:
    if "--agentx" in sys.argv[1:]:  # AgentX rules next to AIPerf's AgentX scenario
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from peer_agentx import main as agentx_main

        return agentx_main([a for a in sys.argv[1:] if a != "--agentx"])
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=["vllm", "llama-cpp"], default="vllm")
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--max-context", type=int, default=24000,
                   help="Cap prompts (Mooncake tokens) before scaling.")
    p.add_argument("--scale", type=float, default=0.125)
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="Multiply the trace's timestamps by this.")
    p.add_argument("--port", type=int, default=8095)
    p.add_argument("--aiperf", type=Path,
                   default=Path.home() / ".cache" / "agentbench" / "aiperf-venv" / "bin" /
                   "aiperf")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "peer-compare")
    args = p.parse_args()
    if not args.aiperf.is_file():
        print(f"no aiperf at {args.aiperf}: python -m venv ~/.cache/agentbench/aiperf-venv "
              "&& ~/.cache/agentbench/aiperf-venv/bin/pip install aiperf", file=sys.stderr)
        return 2
    from agentbench.engines.server import managed_server

    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    slice_path = out / "mooncake-slice.jsonl"
    n, block = write_slice(args.requests, args.max_context, args.scale, args.time_scale,
                           slice_path)
    print(f"slice: {n} requests, block {block} tokens -> {slice_path}", file=sys.stderr)
    results: dict[str, dict[str, float]] = {}
    for tool in ("agentbench", "aiperf"):
        cfg = server_cfg(args.engine, args.port)
        t0 = time.monotonic()
        with managed_server(cfg, ROOT, out) as srv:
            (out / f"{tool}-server").mkdir(exist_ok=True)
            srv.adopt(out / f"{tool}-server")  # the engine's log and server.json
            before = engine_ttft(args.port)
            if tool == "agentbench":
                results[tool] = run_agentbench(slice_path, block, n, args.port, out,
                                               args.engine)
            else:
                results[tool] = run_aiperf(args.aiperf, slice_path, block, args.port, out,
                                           args.engine)
            after = engine_ttft(args.port)
            if before and after and after[1] > before[1]:
                # the engine's own view of the same run (agentbench's count includes its
                # start-up calibration requests, a few 1-token prompts)
                results[tool]["engine_ttft_mean_ms"] = (
                    1000 * (after[0] - before[0]) / (after[1] - before[1]))
                results[tool]["engine_requests"] = after[1] - before[1]
        print(f"{tool}: done in {time.monotonic() - t0:.0f} s (engine start included)",
              file=sys.stderr)
    rows = [("requests (ok/sent)", "{ok:.0f}/{requests:.0f}"),
            ("TTFT p50 ms", "{ttft_p50_ms:.1f}"), ("TTFT p99 ms", "{ttft_p99_ms:.1f}"),
            ("TTFT mean ms", "{ttft_mean_ms:.1f}"),
            ("E2E p50 ms", "{e2e_p50_ms:.1f}"), ("E2E p99 ms", "{e2e_p99_ms:.1f}"),
            ("output tok/s", "{output_tok_s:.1f}"), ("requests/s", "{requests_per_s:.3f}")]
    a, b = results["agentbench"], results["aiperf"]
    print(f"\n{args.engine}, Mooncake slice of {n} requests ({slice_path})")
    print(f"{'metric':<20}{'agentbench':>14}{'aiperf':>14}{'diff':>10}")
    if "engine_ttft_mean_ms" in a and "engine_ttft_mean_ms" in b:
        rows.append(("engine's TTFT mean ms", "{engine_ttft_mean_ms:.1f}"))
    for label, fmt in rows:
        key = fmt[1:fmt.index(":")]
        diff = "" if key == "ok" or not b[key] else f"{(a[key] - b[key]) / b[key]:+.1%}"
        print(f"{label:<20}{fmt.format(**a):>14}{fmt.format(**b):>14}{diff:>10}")
    (out / "compare.json").write_text(json.dumps(results, indent=1))
    return 0 if all(math.isfinite(v) for r in results.values() for v in r.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
