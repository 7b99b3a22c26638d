"""A run whose every request fails at once (here: a context window no prompt fits) on a
virtual clock would recycle sessions forever at one instant, never reaching its
duration; it stops and says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbench.experiment import run_experiment
from agentbench.replay.stages import STANDSTILL_TREES
from agentbench.scenario.loading import validate_data


@pytest.mark.timeout(60)
def test_requests_that_all_fail_at_once_stop_the_run(tmp_path: Path) -> None:
    sc = validate_data({
        "name": "still", "seed": 0,
        "endpoints": [{"kind": "simulated", "max_context_tokens": 100}],
        "trace": {"kind": "synth", "profile": "codex", "sessions": 20},
        "load": {"kind": "lanes", "concurrency": 3},
        "limits": {"duration_s": 600, "recycle": True},
        "output": {"dir": str(tmp_path), "run_id": "still"},
    }, "t")
    res = run_experiment(sc, progress=False).runs[0]
    run = json.loads((res.run_dir / "run.json").read_text())
    assert run["stopped_reason"].startswith("simulated time stood still: "
                                            f"{STANDSTILL_TREES} sessions in a row")
    req = res.summary["overall"]["requests"]
    assert req["ok"] == 0 and req["failed"] == req["total"]
    # each lane stopped after the bound (one more per lane may have been under way)
    assert 3 * STANDSTILL_TREES <= res.summary["overall"]["agents"]["trees"] <= 3 * (
        STANDSTILL_TREES + 1)
