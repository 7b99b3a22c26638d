"""A FIFO given where a short file is read or written (a scenario, a synth profile, gate's
``--markdown``): one line when nothing is at its other end, where each waited forever;
a pipe with its other end open still works (``validate <(cat x.yaml)``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.traces.smallfile import read_head, write_text

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    f = tmp_path / "f.yaml"
    os.mkfifo(f)
    return f


def _one_line(args: list[str]) -> str:
    r = subprocess.run([sys.executable, "-m", "agentbench.cli", *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line, = r.stderr.strip().splitlines()
    return line


def test_a_fifo_with_nothing_at_its_other_end_is_one_line(fifo: Path, tmp_path: Path) -> None:
    assert "the file is empty" in _one_line(["validate", str(fifo)])
    assert "the profile is empty" in _one_line(
        ["traces", "synth", "-p", str(fifo), "-n", "1", "-o", str(tmp_path / "t.parquet")])
    with pytest.raises(OSError):  # ENXIO: no reader
        write_text(fifo, "x")


def test_a_fifo_with_a_writer_waiting_is_read_whole(fifo: Path) -> None:
    """The writer opens first (its open waits for a reader), as a program feeding the FIFO
    does; a writer that comes only after the read began is not waited for (the FIFO reads
    as empty: the case above)."""
    import time

    w = subprocess.Popen(["sh", "-c", f"cat '{ROOT}/scenarios/quickstart.yaml' > '{fifo}'"])
    try:
        time.sleep(0.5)  # the shell is in open(), waiting for a reader
        r = CliRunner().invoke(app, ["validate", str(fifo)])
        assert r.exit_code == 0 and "ok (quickstart)" in r.output, r.output
    finally:
        if w.poll() is None:  # the read failed: let the writer go
            with open(fifo, "rb") as f:
                f.read()
        w.wait(timeout=30)


def test_read_head_and_write_text_on_regular_files(tmp_path: Path) -> None:
    f = tmp_path / "x.txt"
    write_text(f, "héllo\n" * 10)
    assert read_head(f, 7) == "héllo\n".encode()
    assert read_head(f, 10_000).decode() == "héllo\n" * 10
    with pytest.raises(IsADirectoryError):
        read_head(tmp_path, 10)
