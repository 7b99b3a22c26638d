"""Reading a TraceLab-sized round file: seconds, rounds per second and memory.

The release (357,161 rounds, ~617 MB of JSONL, ~52 MB gzipped) is not bundled, so this
writes a stand-in: sessions drawn from the ``codex-tracelab`` profile (TraceLab's own
Codex figures: a mean of ~120 rounds per session, inputs near 116K tokens) written as
TraceLab round lines with timing events and tools like the corpus's, gzipped. A child
process then reads it with the ``tracelab`` reader and prints the seconds, the rounds per
second, its peak RSS, and the hash ids the trace holds against what one array per round
would hold (the reader's sessions share one growing buffer each).

    python benchmarks/tracelab_read_bench.py [--sessions 400] [--block-size 16]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds")


def write_standin(path: Path, sessions: int) -> int:
    from agentbench.traces.synth import synthesize

    trace = synthesize("codex-tracelab", sessions, 7)
    n = 0
    with gzip.open(path, "wt") as f:
        for s in trace.sessions:
            t0 = 1.78e9 + s.start_s
            prev = None
            for k, turn in enumerate(s.turns):
                sent = t0 + turn.t
                cached = 0 if prev is None else prev if turn.input_tokens >= prev else \
                    min(6912, turn.input_tokens)  # a compaction keeps the system prompt
                row = {"provider": "codex", "session_id": f"codex:{s.session_id}",
                       "round_index": k, "round_id": f"turn:{k}", "turn_id": "turn",
                       "model": "gpt-5.4", "input_tokens_total": turn.input_tokens,
                       "prefix_tokens": cached, "newly_append_tokens": turn.input_tokens - cached,
                       "claude_uncached_input_tokens": None,
                       "claude_cache_creation_input_tokens": None,
                       "claude_cache_read_input_tokens": None,
                       "output_tokens": turn.output_tokens, "reasoning_output_tokens": 0,
                       "timing_events": [
                           {"event_type": "tool_result", "timestamp": _iso(sent),
                            "source": "response_item.function_call_output",
                            "tool_call_id": f"call_{n}", "result_chars": 812},
                           {"event_type": "reasoning", "timestamp": _iso(sent + 1.0),
                            "source": "response_item.reasoning"},
                           {"event_type": "tool_call", "timestamp": _iso(sent + (turn.api_s or 1)),
                            "source": "response_item.function_call", "tool_call_id": f"c{n}",
                            "tool_name": "exec_command", "tool_index": 0},
                           {"event_type": "usage_report", "timestamp": _iso(sent + 0.1 + (
                               turn.api_s or 1)), "source": "event_msg.token_count"}],
                       "tools": [{"tool_index": 0, "tool_name": "exec_command",
                                  "tool_call_id": f"c{n}", "emitted_at": _iso(sent + 1),
                                  "result_at": _iso(sent + 2), "input_chars": 120,
                                  "result_chars": 812, "tool_wall_latency_ms": 1000,
                                  "tool_internal_latency_ms": 950, "is_error": False}],
                       "current_input_event_count": 1, "current_user_message_count": 0,
                       "current_tool_result_count": 1, "current_user_message_chars": 0,
                       "current_tool_result_chars": 812, "current_input_chars": 812,
                       "first_input_event_type": "tool_result", "store": ".codex",
                       "trace_key": f"codex:codex:{s.session_id}:turn:{k}"}
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
                prev = turn.input_tokens
                n += 1
    return n


CHILD = """
import json, sys, time
import numpy as np
from agentbench.traces.readers import read_trace
def peak():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
base = peak()
t = time.perf_counter()
trace = read_trace(sys.argv[1], block_size=int(sys.argv[2]))
sec = time.perf_counter() - t
held = {}
for s in trace.sessions:
    for turn in s.turns:
        b = turn.hash_ids.base if turn.hash_ids.base is not None else turn.hash_ids
        held[id(b)] = b.nbytes
per_round = sum(t.hash_ids.nbytes for s in trace.sessions for t in s.turns)
print(json.dumps({"seconds": sec, "rounds": trace.n_requests(), "peak_mb": peak(),
                  "base_mb": base, "ids_mb": sum(held.values()) / 2**20,
                  "per_round_mb": per_round / 2**20}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--block-size", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rounds.jsonl.gz"
        t = time.perf_counter()
        rounds = write_standin(path, args.sessions)
        print(f"stand-in: {args.sessions} sessions, {rounds:,} rounds, "
              f"{path.stat().st_size / 2**20:.1f} MB gzipped (written in "
              f"{time.perf_counter() - t:.1f} s)")
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(args.block_size)],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        r = json.loads(out.stdout)
        ratio = r["per_round_mb"] / max(r["ids_mb"], 1e-9)
        print(f"read: {r['seconds']:.1f} s, {r['rounds'] / r['seconds']:,.0f} rounds/s; "
              f"peak RSS {r['peak_mb']:.0f} MB ({r['peak_mb'] - r['base_mb']:.0f} MB over the "
              f"imports); hash ids held {r['ids_mb']:.1f} MB, one array per round would "
              f"hold {r['per_round_mb']:.1f} MB ({ratio:.1f}x)")
        full = 357_161 / r["rounds"]
        print(f"the release's 357,161 rounds at this rate: ~{r['seconds'] * full:.0f} s, "
              f"hash ids ~{r['ids_mb'] * full:.0f} MB")


if __name__ == "__main__":
    main()
