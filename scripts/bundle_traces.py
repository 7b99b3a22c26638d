"""Rebuild the traces bundled in the package (agentbench/traces/builtin/) from their
originals: the 40 Claude Code (Weka) traces with their subagents and the two Mooncake
FAST'25 traces, read by their own readers and written as native parquet, with the
index of their facts that `agentbench traces list` prints.

    python scripts/bundle_traces.py [--traces ../shared/traces]

Sessions keep every field but ``source`` (and, for Mooncake, ``scope``), which name the
file relative to the traces folder instead of this machine's path, so the bundle is the
same wherever it is built. tests/traces/test_builtin_traces.py checks the bundle against the
originals.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentbench.traces.model import Trace  # noqa: E402
from agentbench.traces.readers import native, read_trace  # noqa: E402
from agentbench.traces.sources import BUILTIN_DIR  # noqa: E402
from agentbench.traces.stats import trace_stats  # noqa: E402

#: name -> (original under the traces folder, format, description, upstream)
BUNDLE = {
    "claude-code-weka": (
        "claude-code-weka", "weka",
        "40 Claude Code agentic coding traces with their subagents (Weka format)",
        "https://github.com/callanjfox/kv-cache-tester (traces/)"),
    "mooncake-conversation": (
        "mooncake/conversation_trace.jsonl", "mooncake",
        "Mooncake FAST'25 conversation trace (one-request sessions, 512-token blocks)",
        "https://github.com/kvcache-ai/Mooncake (FAST25-release/traces/)"),
    "mooncake-synthetic": (
        "mooncake/synthetic_trace.jsonl", "mooncake",
        "Mooncake FAST'25 synthetic trace (one-request sessions, 512-token blocks)",
        "https://github.com/kvcache-ai/Mooncake (FAST25-release/traces/)"),
}

NOTICE = """\
agentbench bundles, as native parquet conversions (token counts, timings, block hash ids;
no text), trace data from two projects, each distributed under the
Apache License, Version 2.0 (the text is in LICENSE-APACHE-2.0 beside this file):

claude-code-weka.parquet
  The 40 traces are a subset of the traces/ folder of the kv-cache-tester project,
  https://github.com/callanjfox/kv-cache-tester, Copyright 2024 Callan Fox.
  They are anonymised: token counts, timings and block hash ids only, no text.

mooncake-conversation.parquet, mooncake-synthetic.parquet
  conversation_trace.jsonl and synthetic_trace.jsonl of the FAST25-release/traces folder
  of the Mooncake project (kvcache-ai), https://github.com/kvcache-ai/Mooncake.
  Fields: timestamp (ms), input_length, output_length, hash_ids (512-token blocks).

Changes: converted to agentbench's native trace format (scripts/bundle_traces.py);
each session's source names its original file. The values are unchanged.
"""


def relocate(trace: Trace, traces_dir: Path) -> Trace:
    """``source`` (and a per-file ``scope``) relative to ``traces_dir``, not absolute."""
    for s in trace.sessions:
        path, sep, fmt = s.source.rpartition("#")
        rel = Path(path).resolve().relative_to(traces_dir.resolve()).as_posix()
        if s.scope == path:
            s.scope = rel
        s.source = f"{rel}{sep}{fmt}"
    return trace


def facts(trace: Trace) -> dict[str, object]:
    st = trace_stats(trace)
    return {"sessions": st.sessions, "roots": st.roots, "spawns": st.spawns,
            "forks": st.forks, "requests": st.requests,
            "input_tokens_p50": st.input_tokens["p50"],
            "output_tokens_p50": st.output_tokens["p50"],
            "turns_per_root_p50": st.turns_per_root["p50"],
            "potential_hit_rate": round(st.potential_hit_rate or 0.0, 6),
            "hash_scopes": st.scopes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces",
                    help="folder holding claude-code-weka/ and mooncake/")
    args = ap.parse_args()
    index = {}
    for name, (rel, fmt, description, upstream) in BUNDLE.items():
        trace = relocate(read_trace(str(args.traces / rel), format=fmt), args.traces)
        out = native.write(trace, BUILTIN_DIR / f"{name}.parquet")
        data = out.read_bytes()
        index[name] = {"file": out.name, "format": "native", "original": rel,
                       "original_format": fmt, "description": description,
                       "upstream": upstream, "licence": "Apache-2.0",
                       "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                       "facts": facts(trace)}
        print(f"{out}: {len(data):,} bytes, {trace.n_requests():,} requests")
    (BUILTIN_DIR / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    (BUILTIN_DIR / "NOTICE").write_text(NOTICE)


if __name__ == "__main__":
    main()
