"""A run.json damaged in ways JSON allows Python to read oddly: nested past the recursion
limit (a RecursionError traceback in report, gate, recover and load) or holding NaN (JSON
has none; Python's reader takes it, and the summary's strict writer then raised
ValueError). The first is one line, exit 2; the second reads as null."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agentbench
from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.results import schema as R
from agentbench.testing.demo import write_demo_run


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_run(tmp_path_factory.mktemp("damaged") / "run", trees=4, turns=4)


def _damaged(demo: Path, where: Path, tail: str) -> Path:
    shutil.copytree(demo, where)
    (where / R.SUMMARY_FILE).unlink(missing_ok=True)
    text = json.dumps(json.loads((demo / R.RUN_FILE).read_text()))
    (where / R.RUN_FILE).write_text(text[:-1] + ", " + tail + "}")
    return where


def test_a_run_json_nested_past_the_recursion_limit_is_one_line(demo: Path,
                                                                  tmp_path: Path) -> None:
    deep = _damaged(demo, tmp_path / "deep", '"deep": ' + "[" * 100_000 + "]" * 100_000)
    for args in (["report", str(deep), "-o", str(tmp_path / "r")],
                 ["gate", str(demo), str(deep)], ["recover", str(deep)]):
        res = CliRunner().invoke(app, args)
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, (args, res.output[-300:])
        assert "run.json: not valid JSON (nested too deeply)" in lines[0], lines
    with pytest.raises(InputError, match="nested too deeply"):
        agentbench.load(deep)


def test_nan_in_a_run_json_reads_as_null(demo: Path, tmp_path: Path) -> None:
    odd = _damaged(demo, tmp_path / "nan", '"odd": NaN, "far": -Infinity')
    res = CliRunner().invoke(app, ["report", str(odd), "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    run = agentbench.load(odd)
    assert run.records.run["odd"] is None and run.records.run["far"] is None
    assert json.loads((odd / R.SUMMARY_FILE).read_text())  # written, strict JSON
