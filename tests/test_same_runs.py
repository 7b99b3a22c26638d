"""``scripts/same_runs.py``, the check that a restructuring left run folders unchanged: two
runs of one virtual-time scenario are the same; a changed setting is found."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import agentbench
from tests.experiment.test_run_experiment import _scenario_file

ROOT = Path(__file__).resolve().parent.parent


def _same_runs():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("same_runs", ROOT / "scripts/same_runs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_same_runs_finds_equal_and_different_runs(tmp_path: Path) -> None:
    same_runs = _same_runs()
    f = _scenario_file(tmp_path, variants=False)
    first = agentbench.run_experiment(f).runs[0].run_dir
    second = agentbench.run_experiment(f).runs[0].run_dir
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    shutil.copytree(first, before / first.name)
    shutil.copytree(second, after / second.name)
    assert same_runs.compare(before / first.name, after / second.name) == []
    assert same_runs.main([str(before), str(after)]) == 0

    f.write_text(f.read_text().replace("seed: 3", "seed: 4"))
    third = agentbench.run_experiment(f).runs[0].run_dir
    shutil.rmtree(after / second.name)
    shutil.copytree(third, after / third.name)
    diffs = same_runs.compare(before / first.name, after / third.name)
    assert any(d.startswith("requests.parquet") for d in diffs)
    assert "run.json.seed: 3 != 4" in diffs
    assert same_runs.main([str(before), str(after)]) == 1
