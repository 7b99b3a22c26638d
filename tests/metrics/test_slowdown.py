"""Agent slowdown against the trace's own pace: each tree's LLM wait over the recorded LLM
time (``api_s``) of the same requests (docs/metrics.md), from a virtual-time run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agentbench.metrics import format_summary
from agentbench.replay import run
from agentbench.scenario.model import Scenario
from agentbench.traces.model import Session, Trace, Turn


def _trace() -> Trace:
    sessions = []
    for r, api in enumerate([0.5, 0.25, None]):
        ts = [Turn(turn=k, t=float(k), think_s=1.0,
                   api_s=(None if api is None and k == 2 else api or 0.1),
                   input_tokens=2048 * (k + 1), output_tokens=64,
                   hash_ids=np.arange(1, 2 * k + 3, dtype=np.int64) + 1000 * r,
                   block_size=1024)
              for k in range(4)]
        sessions.append(Session(f"s{r}", None, "root", None, None, None, "t", "x", 0.0, ts))
    return Trace(sessions)


def test_slowdown_is_llm_wait_over_the_recorded_llm_time(tmp_path: Path) -> None:
    sc = Scenario.model_validate({
        "name": "slow", "seed": 1,
        "endpoints": [{"kind": "simulated", "instances": 1, "preset": "h200-llama3-70b"}],
        "trace": {"kind": "file", "source": "synthetic"},
        "load": {"kind": "lanes", "concurrency": 3},
        "limits": {"recycle": False}, "output": {"dir": str(tmp_path)}})
    res = run(sc, trace=_trace(), progress=False)
    import agentbench

    r = agentbench.load(res.run_dir)
    trees = r.agents.set_index("tree_id")
    sess = r.sessions.set_index("session_id")
    assert sess.loc["s0", "recorded_llm_ns"] == 4 * 500_000_000
    assert sess.loc["s1", "recorded_llm_ns"] == 4 * 250_000_000
    assert sess["recorded_llm_ns"].isna().sum() == 1  # s2: one turn has no api_s
    for tree, rec_s in (("s0", 2.0), ("s1", 1.0)):
        row = trees.loc[tree + "#0"]
        assert row["slowdown"] == row["llm_wait_s"] / rec_s
    assert np.isnan(trees.loc["s2#0", "slowdown"])
    a = r.summary["overall"]["agents"]["slowdown"]
    assert a["count"] == 2
    assert "the trace's LLM time (p50" in format_summary(r.summary)
