"""A minimal one-screen summary read back from ``requests.parquet`` (used by the CLI only
when ``agentbench.metrics`` is not available; the full figures live there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from agentbench import records


def quick_summary(run_dir: Path) -> str:
    """Requests, errors, TTFT / E2E p50 and p99 (ms), tokens, measured window."""
    t = pq.read_table(run_dir / records.REQUESTS_FILE,
                      columns=["phase", "status", "sent_ns", "first_token_ns", "end_ns",
                               "prompt_tokens", "completion_tokens"]).to_pandas()
    m = t[t.phase == records.MEASURE]
    ok = m[m.status == records.OK]
    lines = [f"requests: {len(m):,} measured ({len(t) - len(m):,} warmup), "
             f"{(m.status != records.OK).sum():,} failed"]
    for name, a, b in (("TTFT", "first_token_ns", "sent_ns"), ("E2E", "end_ns", "sent_ns")):
        v = (ok[a] - ok[b]).dropna().to_numpy(dtype=np.float64) / 1e6
        if len(v):
            lines.append(f"{name} ms: p50 {np.percentile(v, 50):.1f}  "
                         f"p99 {np.percentile(v, 99):.1f}")
    if len(m):
        span = (m.end_ns.max() - m.sent_ns.min()) / 1e9
        toks = float(m.prompt_tokens.fillna(0).sum() + m.completion_tokens.fillna(0).sum())
        lines.append(f"window {span:.1f} s, {toks / max(span, 1e-9):,.0f} tokens/s")
    return "\n".join(lines)
