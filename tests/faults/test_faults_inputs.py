"""Inputs that once ended in a traceback, a hang or the wrong exit code: each is now one
line and exit code 2 (docs/reliability.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from tests.helpers import SCENARIOS


def _one_line(args: list[str]) -> str:
    res = CliRunner().invoke(app, args)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "Traceback" not in res.output, \
        res.output
    return lines[0]


@pytest.mark.parametrize("run_id", ["../x", ".", "a" * 300, "a/b"])
def test_a_run_id_that_is_not_a_plain_name(run_id: str, tmp_path: Path) -> None:
    for args in (["run", str(SCENARIOS / "quickstart.yaml")],
                 ["run", "--url", "http://127.0.0.1:9", "--model", "m"]):
        line = _one_line([*args, "--run-id", run_id, "-o", str(tmp_path)])
        assert "--run-id: must be a plain folder name" in line
    assert list(tmp_path.iterdir()) == []


def test_a_results_folder_with_a_line_break_is_refused(tmp_path: Path) -> None:
    """``-o $'out\\nx'`` was taken, and the printed results line split in two."""
    line = _one_line(["run", str(SCENARIOS / "quickstart.yaml"), "-o", str(tmp_path / "o\nx")])
    assert "--output: must be one line of printable text" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["/proc", "/sys/kernel"])
def test_a_results_folder_that_refuses_folders(where: str) -> None:
    if not Path(where).is_dir():
        pytest.skip(f"no {where} here")
    line = _one_line(["run", str(SCENARIOS / "quickstart.yaml"), "-o", where])
    assert "output.dir" in line and "cannot write results there" in line


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "device", "link loop"])
def test_a_trace_that_is_not_a_regular_file(kind: str, tmp_path: Path) -> None:
    """A FIFO would block forever and /dev/zero is endless: both are refused before a byte
    is read; a loop of symbolic links is named as one."""
    if kind == "fifo":
        path = tmp_path / "trace.jsonl"
        os.mkfifo(path)
        words = "not a regular file or folder"
    elif kind == "device":
        path = Path("/dev/zero")
        words = "not a regular file or folder"
    else:
        path = tmp_path / "a.jsonl"
        (tmp_path / "b.jsonl").symlink_to(path)
        path.symlink_to(tmp_path / "b.jsonl")
        words = "a loop of symbolic links"
    line = _one_line(["traces", "stats", str(path)])
    assert str(path) in line and words in line
    line = _one_line(["run", "--url", "http://127.0.0.1:9", "--model", "m", "--trace",
                      str(path), "-o", str(tmp_path / "out"), "--no-progress"])
    assert words in line, line


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    res = CliRunner().invoke(app, ["run", str(SCENARIOS / "quickstart.yaml"), "-o", str(out),
                                   "--run-id", "q", "--no-progress"])
    assert res.exit_code == 0, res.output
    return out / "q"


@pytest.mark.timeout(60, method="thread")  # a FIFO's open blocks in C: no signal ends it
@pytest.mark.parametrize("name", ["requests.parquet.spool.arrows",
                                  "sessions.parquet.journal.jsonl", "run.json",
                                  "requests.parquet"])
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_run_folder_file_that_is_not_a_regular_file(quick_run: Path, tmp_path: Path,
                                                      name: str, kind: str) -> None:
    """A FIFO where the run keeps a file would block every reader forever (the spool's
    recovery opened it); a folder there raised from deep in the recovery. Both are one
    line naming the path, for every reader, and the folder is left as it was."""
    import shutil

    d = tmp_path / "q"
    shutil.copytree(quick_run, d)
    path = d / name
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    before = sorted(p.name for p in d.iterdir())
    words = "a folder where the run keeps a file" if kind == "folder" else \
        "not a regular file where the run keeps one"
    for args in (["report", str(d), "-o", str(tmp_path / "rep")], ["recover", str(d)],
                 ["gate", str(d), str(d)]):
        line = _one_line(args)
        assert str(path) in line and words in line, line
    assert sorted(p.name for p in d.iterdir()) == before
