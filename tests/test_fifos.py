"""A FIFO given where a short file is read or written (a scenario, a synth profile, gate's
``--markdown``): one line when nothing is at its other end, where each waited forever;
a pipe with its other end open still works (``validate <(cat x.yaml)``)."""

from __future__ import annotations

import os
import subprocess
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


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbench.traces import smallfile

    monkeypatch.setattr(smallfile, "PEER_WAIT_S", 0.3)  # 10 s in use


def _one_line(args: list[str]) -> str:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    line, = r.output.strip().splitlines()
    return line


def test_a_fifo_with_nothing_at_its_other_end_is_one_line(fifo: Path, tmp_path: Path,
                                                          short_wait: None) -> None:
    said = "(a FIFO that nothing opened to write within 0.3 s)"
    assert _one_line(["validate", str(fifo)]).endswith(f"cannot read scenario {said}")
    assert _one_line(["traces", "synth", "-p", str(fifo), "-n", "1", "-o",
                      str(tmp_path / "t.parquet")]).endswith(f"cannot read profile {said}")
    with pytest.raises(OSError):  # ENXIO: no reader
        write_text(fifo, "x")
    empty = tmp_path / "e.yaml"  # what a FIFO closed without a byte reads as, too
    empty.write_text("")
    assert "the profile is empty" in _one_line(
        ["traces", "synth", "-p", str(empty), "-n", "1", "-o", str(tmp_path / "t.parquet")])


@pytest.mark.parametrize("writer_first", [True, False])
def test_a_fifo_whose_writer_opens_first_or_a_moment_later_is_read_whole(
        fifo: Path, writer_first: bool) -> None:
    """A writer that opens after the read began is waited for (up to ``PEER_WAIT_S``), as
    the old blocking open waited for it."""
    import time

    delay = 0 if writer_first else 1.0
    w = subprocess.Popen(["sh", "-c", f"sleep {delay}; "
                          f"cat '{ROOT}/scenarios/quickstart.yaml' > '{fifo}'"])
    try:
        if writer_first:
            time.sleep(0.5)  # the shell is in open(), waiting for a reader
        r = CliRunner().invoke(app, ["validate", str(fifo)])
        assert r.exit_code == 0 and "ok (quickstart)" in r.output, r.output
    finally:
        # the writer ends once read (it may still be exiting: poll() said None here, and a
        # blocking open to let it go then waited forever); one stuck in open() is killed
        try:
            w.wait(timeout=15)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait(timeout=15)


def test_a_fifo_whose_reader_opens_a_moment_later_is_written(fifo: Path) -> None:
    r = subprocess.Popen(["sh", "-c", f"sleep 1; cat '{fifo}'"], stdout=subprocess.PIPE)
    try:
        write_text(fifo, "héllo\n")
        assert r.communicate(timeout=30)[0] == "héllo\n".encode()
    finally:
        r.kill()


def test_read_head_and_write_text_on_regular_files(tmp_path: Path) -> None:
    f = tmp_path / "x.txt"
    write_text(f, "héllo\n" * 10)
    assert read_head(f, 7) == "héllo\n".encode()
    assert read_head(f, 10_000).decode() == "héllo\n" * 10
    with pytest.raises(IsADirectoryError):
        read_head(tmp_path, 10)
