"""A run whose every request fails at once (here: a context window no prompt fits), or
takes no simulated time at all (free steps, no think time), on a virtual clock would
recycle sessions forever at one instant, never reaching its duration; it stops and says
why."""

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


@pytest.mark.timeout(120)
def test_requests_that_take_no_time_stop_the_run_and_say_so(tmp_path: Path) -> None:
    """The instant preset's steps are free and ``time_scale: 0`` drops the think times:
    every request ends at the instant it starts, all of them ok. The run used to recycle
    sessions at t = 0 until killed (or stopped with the message of failed requests)."""
    sc = validate_data({
        "name": "free", "seed": 0,
        "endpoints": [{"kind": "simulated", "preset": "instant", "instances": 2}],
        "trace": {"kind": "synth", "profile": "codex", "sessions": 4,
                  "transform": {"scale": 0.02}},
        "load": {"kind": "lanes", "concurrency": 1},
        "timing": {"time_scale": 0},
        "limits": {"duration_s": 60, "recycle": True},
        "output": {"dir": str(tmp_path), "run_id": "free"},
    }, "t")
    res = run_experiment(sc, progress=False).runs[0]
    run = json.loads((res.run_dir / "run.json").read_text())
    reason = run["stopped_reason"]
    assert reason.startswith(f"simulated time stood still: {STANDSTILL_TREES} sessions")
    assert "requests took no simulated time" in reason and "failed" not in reason
    req = res.summary["overall"]["requests"]
    assert req["failed"] == 0 and req["ok"] == req["total"] > 0
