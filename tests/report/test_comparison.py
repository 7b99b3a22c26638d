"""``compare``'s headlines: one sentence a run, never an empty one."""

from __future__ import annotations

from pathlib import Path

from agentbench.experiment import run_experiment
from agentbench.scenario.loading import validate_data


def test_a_run_without_a_successful_request_has_a_headline_that_says_so(
        tmp_path: Path) -> None:
    """A sweep whose variant failed every request (no figure of it to compare) printed
    'tiny vs ok: ' and nothing after it; the report said why, ``agentbench run`` and
    ``compare`` did not."""
    sc = validate_data({
        "name": "x", "endpoints": [{"kind": "simulated", "preset": "instant"}],
        "trace": {"kind": "synth", "profile": "codex", "sessions": 2},
        "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 3},
        "output": {"dir": str(tmp_path)},
        "variants": [{"name": "ok"}, {"name": "tiny", "set": {
            "endpoints.0.max_context_tokens": 100}}]}, "t")
    result = run_experiment(sc)
    assert result.comparison.headlines == [
        "tiny vs ok: no headline figure is in both (no successful measured request in one "
        "of them)"]
