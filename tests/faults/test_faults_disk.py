"""A results disk that fills up or turns read-only mid-run: the run stops with one line
(exit 1), every row that fit stays on disk, and the run reads once there is room.

A real small filesystem (tmpfs) is used where this process may mount one (root in a
container usually may); the file-size limit (RLIMIT_FSIZE, EFBIG) runs everywhere."""

from __future__ import annotations

import contextlib
import resource
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbench.replay.sigterm import STOPPED
from tests.faults.harness import (
    agentbench,
    one_line_error,
    report_reads,
    rows,
    run_cli,
    run_json,
    scenario,
    wait_for,
)


@contextlib.contextmanager
def tmpfs(path: Path, size: str, options: str = "") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}{options}", "tmpfs",
                        str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _limit_file_size(limit: int) -> Any:
    def pre() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


def _long_run(tmp_path: Path, url: str) -> Path:
    return scenario(tmp_path, url, lanes=8, limits="duration_s: 300")


def _check_stopped_run(r: Any, run: Path, srv: Any, tmp_path: Path, why: str,
                       stopped_by: str | None = None) -> None:
    """``stopped_by``: what stopped the run, as its cancelled rows say (default: the
    results that could not be written)."""
    assert r.returncode == 1, r.stderr
    line = one_line_error(r.stderr)
    assert why in line and "request rows kept" in line, line
    kept = int(line.split("; ")[1].split()[0])
    assert kept > 0
    where = tmp_path / "copy"
    shutil.copytree(run, where)  # to a disk with room: the first reader finishes it
    req = rows(where)
    assert kept == len(req) <= len(srv.seen())  # the line counts what a reader recovers
    # no deadline came (300 s): a kept row cancelled by the stop says why
    cancelled = set(req.error_message[req.status == "cancelled"])
    said = stopped_by or f"the results could not be written ({why})"
    assert cancelled <= {f"cancelled: {said}"}, cancelled
    report_reads(where, tmp_path)


@pytest.mark.timeout(180)
def test_a_full_disk_stops_the_run_with_one_line_and_keeps_what_fit(
        tmp_path: Path, fault_server: Any) -> None:
    srv = fault_server()
    with tmpfs(tmp_path / "disk", "1m") as disk:
        r = run_cli("run", str(_long_run(tmp_path, srv.url)), "-o", str(disk), "--run-id",
                    "r", timeout=150)
        run = disk / "r"
        assert run_json(run)["status"] == "results_write_failed"
        _check_stopped_run(r, run, srv, tmp_path, "No space left on device")


@pytest.mark.timeout(180)
def test_a_file_size_limit_stops_the_run_the_same_way(tmp_path: Path,
                                                      fault_server: Any) -> None:
    srv = fault_server()
    r = run_cli("run", str(_long_run(tmp_path, srv.url)), "-o", str(tmp_path / "out"),
                "--run-id", "r", timeout=150, preexec_fn=_limit_file_size(400_000))
    run = tmp_path / "out" / "r"
    assert run_json(run)["status"] == "results_write_failed"
    _check_stopped_run(r, run, srv, tmp_path, "File too large")


@pytest.mark.timeout(180)
def test_a_file_size_limit_stops_a_workers_run_the_same_way(tmp_path: Path,
                                                            fault_server: Any) -> None:
    """With ``--workers 2`` a worker's spool is what meets the limit: run.json said
    ``crashed`` (the worker's early end broke the parent's stage) and the line had no count
    of the rows kept."""
    srv = fault_server()
    r = run_cli("run", str(_long_run(tmp_path, srv.url)), "-o", str(tmp_path / "out"),
                "--run-id", "r", "--workers", "2", "--no-progress", timeout=150,
                preexec_fn=_limit_file_size(200_000))
    run = tmp_path / "out" / "r"
    info = run_json(run)
    assert info["status"] == "results_write_failed", info["status"]
    assert "File too large" in info["results_write_error"]
    _check_stopped_run(r, run, srv, tmp_path, "File too large")


@pytest.mark.timeout(180)
def test_a_results_folder_that_turns_read_only_mid_run(tmp_path: Path,
                                                      fault_server: Any) -> None:
    """The run folder is mounted read-only over itself mid-run (the files already open
    keep their writes; nothing new can be made there): finishing the files fails, the run
    exits 1 with one line, and the rows stay in the spool and journal for the first reader
    once the folder is writable again."""
    srv = fault_server(itl=0.002)
    p = agentbench("run", str(_long_run(tmp_path, srv.url)), "-o", str(tmp_path / "out"),
                   "--run-id", "r")
    run = tmp_path / "out" / "r"
    wait_for(lambda: (run / "requests.parquet.spool.arrows").exists(), 60)
    bind = subprocess.run(["mount", "--bind", str(run), str(run)], capture_output=True,
                          text=True)
    if bind.returncode != 0:
        p.kill()
        p.communicate()
        pytest.skip(f"cannot bind-mount here ({bind.stderr.strip()})")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(run)], check=True)
        wait_for(lambda: len(srv.done_ns()) >= 40, 60)
        p.send_signal(signal.SIGINT)  # the run ends; its files cannot be finished
        out, err = p.communicate(timeout=120)
    finally:
        subprocess.run(["umount", "-l", str(run)], capture_output=True)
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    # Ctrl-C stopped it (the writes failed only at the end): its cancelled rows say so
    _check_stopped_run(r, run, srv, tmp_path, "Read-only file system", stopped_by=STOPPED)


@pytest.mark.timeout(60)
def test_a_read_only_results_folder_is_refused_before_the_run(tmp_path: Path,
                                                              fault_server: Any) -> None:
    srv = fault_server()
    with tmpfs(tmp_path / "disk", "1m") as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        r = run_cli("run", str(_long_run(tmp_path, srv.url)), "-o", str(disk), "--run-id",
                    "r", timeout=50)
        assert r.returncode == 2
        assert "cannot write results there" in one_line_error(r.stderr)
        assert srv.seen() == []


@pytest.mark.timeout(180)
def test_a_disk_with_less_room_than_the_reserve_still_keeps_rows(
        tmp_path: Path, fault_server: Any) -> None:
    """200 KiB free, less than the 256 KiB reserve a run sets aside for its last run.json:
    the run takes no reserve (one would hold every free byte) and keeps the rows that fit."""
    import os

    srv = fault_server()
    with tmpfs(tmp_path / "disk", "1m") as disk:
        st = os.statvfs(disk)
        filler = st.f_bavail * st.f_frsize - 200 * 1024
        (disk / "filler").write_bytes(b"\0" * filler)
        r = run_cli("run", str(_long_run(tmp_path, srv.url)), "-o", str(disk), "--run-id",
                    "r", timeout=150)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        where = tmp_path / "copy"
        shutil.copytree(disk / "r", where)
    req = rows(where)  # on a disk with room, the first reader finishes the run
    assert 0 < len(req) <= len(srv.seen())
    report_reads(where, tmp_path)


@pytest.mark.timeout(120)
def test_a_report_that_cannot_be_written_names_the_file(tmp_path: Path) -> None:
    """Under a file-size limit ``report`` said "error: File too large" and no file: a
    write's error, unlike an open's, carries no name."""
    from agentbench.testing.demo import write_demo_run

    run = write_demo_run(tmp_path / "demo", trees=4, turns=6)
    out = tmp_path / "rep"
    r = run_cli("report", str(run), "-o", str(out), timeout=90,
                preexec_fn=_limit_file_size(20_000))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {out}/") and "File too large" in lines[0], lines[0]


@pytest.mark.timeout(120)
def test_a_disk_full_before_the_run_starts_is_one_line_naming_its_folder(
        tmp_path: Path) -> None:
    """A disk with no byte left for run.json: the line said only "No space left on
    device (--debug shows where)"; it now names the folder and says the run did not
    start. A disk with no inode left for the run's claim left an empty run folder."""
    import os

    sc = str(Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml")
    with tmpfs(tmp_path / "full", "1m") as disk:
        st = os.statvfs(disk)
        (disk / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize))
        r = run_cli("run", sc, "-o", str(disk / "out"), timeout=100)
        assert r.returncode == 1, r.stderr
        assert one_line_error(r.stderr) == (
            f"error: {disk / 'out'}: cannot write results (No space left on device); the "
            "run did not start (its folder is removed)")
        assert list((disk / "out").iterdir()) == []
    with tmpfs(tmp_path / "inodes", "1m", ",nr_inodes=2") as disk:
        r = run_cli("run", sc, "-o", str(disk), timeout=100)
        assert r.returncode == 2, r.stderr
        assert "cannot write results there (No space left on device)" in \
            one_line_error(r.stderr)
        assert list(disk.iterdir()) == []


@pytest.mark.timeout(120)
def test_recover_on_a_disk_still_full_is_one_line_exit_1_and_loses_nothing(
        tmp_path: Path) -> None:
    """``recover`` of a run a full disk stopped, the disk still full: exit 2 (bad input)
    with pyarrow's text; now exit 1, as every write the disk refuses, saying the rows are
    still in the spools, and a recover once there is room finishes the run."""
    import os

    sc = str(Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml")
    with tmpfs(tmp_path / "disk", "1m") as disk:
        r = run_cli("run", sc, "-o", str(disk), "--run-id", "r", timeout=100)
        assert r.returncode == 1, r.stderr
        st = os.statvfs(disk)
        (disk / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize))
        spools = sorted(p.name for p in (disk / "r").iterdir())
        r = run_cli("recover", str(disk / "r"), timeout=100)
        assert r.returncode == 1, r.stderr
        assert one_line_error(r.stderr) == (
            f"error: {disk / 'r'}: cannot write results (No space left on device); the "
            f"cut-short run's rows are still in its spools: free space, then `agentbench "
            f"recover {disk / 'r'}`")
        assert sorted(p.name for p in (disk / "r").iterdir()) == spools
        (disk / "filler").unlink()
        r = run_cli("recover", str(disk / "r"), timeout=100)
        assert r.returncode == 0 and "recovered requests.parquet" in r.stdout, r.stderr
        assert run_json(disk / "r")["status"] == "results_write_failed"
