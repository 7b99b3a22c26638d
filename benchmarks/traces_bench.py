"""How long reading + analysing the shared traces takes, and synthesizing AgentX sessions.

Each stage runs in its own child process (so its peak RSS is its own) and prints:
- reference: plain ``json.load`` (Weka, one document per file) / ``json.loads`` per line
  (Mooncake JSONL) over the same files, measured in the same process;
- read: the agentbench reader into the trace model; stats: ``trace_stats`` on it;
- ratio read / json (target: within 3x: reading is I/O- and JSON-bound);
- synth: ``synthesize("agentx", 1000, 0)`` and ``trace_stats`` of it, with the memory its
  hash ids take (per-session buffers) against one copy per turn.
Times are the best of ``--repeat`` runs (the machine may be shared).

    python benchmarks/traces_bench.py [--repeat 3] [--sessions 1000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
WEKA = TRACES / "claude-code-weka"
MOONCAKE = TRACES / "mooncake" / "conversation_trace.jsonl"


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        out = None  # the previous result is freed before the next run (peak RSS)
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _json_weka() -> int:
    n = 0
    for f in sorted(WEKA.glob("*.json")):
        with f.open("rb") as fh:
            n += len(json.load(fh)["requests"])
    return n


def _json_mooncake() -> int:
    with MOONCAKE.open("rb") as fh:
        return sum(1 for line in fh if line.strip() and json.loads(line))


def stage_read(fmt: str, repeat: int) -> dict[str, Any]:
    from agentbench.traces.readers import read_trace
    from agentbench.traces.stats import trace_stats

    path, ref = (WEKA, _json_weka) if fmt == "weka" else (MOONCAKE, _json_mooncake)
    if not path.exists():
        return {"stage": fmt, "unavailable": f"no data at {path}"}
    if importlib.util.find_spec(f"agentbench.traces.readers.{fmt}") is None:
        return {"stage": fmt, "unavailable": f"reader agentbench/traces/readers/{fmt}.py "
                "not there yet"}
    base_rss = _peak_rss_mb()
    t_json, _ = _best(ref, repeat)
    t_read, trace = _best(lambda: read_trace(str(path), format=fmt), repeat)
    t_stats, st = _best(lambda: trace_stats(trace), repeat)
    return {
        "stage": fmt, "files": len(list(WEKA.glob("*.json"))) if fmt == "weka" else 1,
        "sessions": st.sessions, "requests": st.requests,
        "potential_hit_rate": st.potential_hit_rate,
        "json_s": t_json, "read_s": t_read, "stats_s": t_stats,
        "read_over_json": t_read / t_json, "read_stats_over_json": (t_read + t_stats) / t_json,
        "rss_before_mb": base_rss, "peak_rss_mb": _peak_rss_mb(),
    }


def stage_synth(sessions: int, repeat: int) -> dict[str, Any]:
    import numpy as np

    from agentbench.traces.stats import trace_stats
    from agentbench.traces.synth import synthesize

    base_rss = _peak_rss_mb()
    t_synth, trace = _best(lambda: synthesize("agentx", sessions, 0), repeat)
    peak_synth = _peak_rss_mb()
    bufs: dict[int, int] = {}
    copies = 0
    for s in trace.sessions:
        for t in s.turns:
            b = t.hash_ids.base if t.hash_ids.base is not None else t.hash_ids
            assert isinstance(b, np.ndarray)
            bufs[id(b)] = b.nbytes
            copies += t.hash_ids.nbytes
    t_stats, st = _best(lambda: trace_stats(trace), 1)
    return {
        "stage": "synth", "sessions": st.sessions, "roots": st.roots, "requests": st.requests,
        "synth_s": t_synth, "stats_s": t_stats,
        "hash_id_buffers_mb": sum(bufs.values()) / 2**20, "hash_ids_as_copies_mb": copies / 2**20,
        "rss_before_mb": base_rss, "peak_rss_after_synth_mb": peak_synth,
        "peak_rss_mb": _peak_rss_mb(),
        "turns_per_root_p50": st.turns_per_root["p50"], "input_p50": st.input_tokens["p50"],
        "potential_hit_rate": st.potential_hit_rate,
    }


def _child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        return {"stage": args[1], "error": out.stderr.strip().splitlines()[-1:]}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _print(r: dict[str, Any]) -> None:
    name = r["stage"]
    if "unavailable" in r or "error" in r:
        print(f"{name:9} unavailable: {r.get('unavailable') or r.get('error')}")
        return
    if name == "synth":
        print(f"{'synth':9} agentx {r['roots']:,} roots -> {r['sessions']:,} sessions, "
              f"{r['requests']:,} requests: synth {r['synth_s']:.2f} s, stats "
              f"{r['stats_s']:.2f} s; hash ids {r['hash_id_buffers_mb']:.1f} MB in "
              f"per-session buffers ({r['hash_ids_as_copies_mb']:,.0f} MB as per-turn copies); "
              f"peak RSS {r['peak_rss_after_synth_mb']:.0f} MB after synth, "
              f"{r['peak_rss_mb']:.0f} MB after stats (imports {r['rss_before_mb']:.0f} MB)")
        print(f"{'':9} turns/root p50 {r['turns_per_root_p50']:.1f}, input p50 "
              f"{r['input_p50']:,.0f}, potential hit {100 * r['potential_hit_rate']:.1f}%")
        return
    print(f"{name:9} {r['files']} file(s), {r['sessions']:,} sessions, {r['requests']:,} "
          f"requests: json {r['json_s']:.3f} s | read {r['read_s']:.3f} s "
          f"({r['read_over_json']:.2f}x json) | stats {r['stats_s']:.3f} s | read+stats "
          f"{r['read_s'] + r['stats_s']:.3f} s ({r['read_stats_over_json']:.2f}x json) | "
          f"peak RSS {r['peak_rss_mb']:.0f} MB (imports {r['rss_before_mb']:.0f} MB) | "
          f"potential hit {100 * r['potential_hit_rate']:.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--stage", choices=["weka", "mooncake", "synth"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stage:
        r = (stage_synth(a.sessions, a.repeat) if a.stage == "synth"
             else stage_read(a.stage, a.repeat))
        print(json.dumps(r))
        return
    print(f"python {sys.version.split()[0]}, best of {a.repeat}")
    for stage in ("weka", "mooncake", "synth"):
        _print(_child(["--stage", stage, "--repeat", str(a.repeat), "--sessions",
                       str(a.sessions)]))


if __name__ == "__main__":
    main()
