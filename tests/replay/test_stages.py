"""A sweep's stages: one per value, each with a label of its own."""

from __future__ import annotations

import json
from pathlib import Path

from agentbench.replay import run
from agentbench.replay.stages import stages_of
from agentbench.scenario.model import LanesLoad, RateLoad, Scenario


def test_a_value_given_twice_is_two_stages_told_apart() -> None:
    """``concurrency: [8, 16, 8]`` ran three stages, two labelled ``c=8``: their requests
    shared one ``stage`` and summary.json merged them into one stage. So did two rates
    alike to 6 digits (``r=0.1``). A label met again now takes ``#2``, ``#3``."""
    lanes = LanesLoad(kind="lanes", concurrency=[8, 16, 8, 8])
    assert [s.label for s in stages_of(lanes)] == ["c=8", "c=16", "c=8#2", "c=8#3"]
    assert [s.lanes for s in stages_of(lanes)] == [8, 16, 8, 8]
    rates = RateLoad(kind="rate", rate_per_s=[0.1000001, 0.2, 0.1000002])
    assert [s.label for s in stages_of(rates)] == ["r=0.1", "r=0.2", "r=0.1#2"]
    assert [s.label for s in stages_of(LanesLoad(kind="lanes", concurrency=[1, 2]))] \
        == ["c=1", "c=2"]


def test_each_stage_of_a_repeated_value_is_summarized(tmp_path: Path) -> None:
    from agentbench.metrics import summarize

    sc = Scenario.model_validate({
        "name": "twice", "endpoints": [{"kind": "simulated", "preset": "instant"}],
        "trace": {"kind": "synth", "profile": "codex", "sessions": 4},
        "load": {"kind": "lanes", "concurrency": [2, 2]}, "limits": {"max_requests": 6},
        "output": {"dir": str(tmp_path), "run_id": "r"}})
    d = run(sc, progress=False).run_dir
    summary = summarize(d)
    assert [st["label"] for st in json.loads((d / "run.json").read_text())["stages"]] \
        == ["c=2", "c=2#2"]
    assert sorted(summary["stages"]) == ["c=2", "c=2#2"]
    assert [summary["stages"][k]["requests"]["ok"] for k in ("c=2", "c=2#2")] == [6, 6]
