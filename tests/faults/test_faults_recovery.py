"""Recovery survives any single kill: of the parent of ``--workers`` processes alone, of
the whole process group, and of ``recover`` itself at every step of its commits. Every
finished row stays readable exactly once (docs/reliability.md)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentbench.results import schema as records
from agentbench.results import spool
from agentbench.results.schema import RequestRecord
from agentbench.results.writer import ResultsWriter
from agentbench.testing.fastserver import events
from agentbench.transport.finish import finish_record
from tests.helpers import ROOT, write_scenario


class _Killed(BaseException):
    """Stands for SIGKILL: nothing catches it, no cleanup runs."""


def _rows(folder: Path, ids: range, flush_rows: int = 2) -> None:
    """A writer killed after spooling some rows (the rest only in the journal)."""
    w = ResultsWriter(folder, flush_rows=flush_rows)
    for i in ids:
        rec = RequestRecord(i, "c=1", "measure", "ep", 0, "t#0", "t", "root", 0, i, 10, 5, 1, 0,
                            sent_ns=20, end_ns=30 + i, http_status=200)
        rec.chunks = events(True, 1)
        rec.chunk_ns = [25] * len(rec.chunks)
        w.add_request(finish_record(rec))
    # no close(): the spool holds the flushed batches, the journal every row


def _killed_run(run: Path, workers: int) -> None:
    """A run folder as a SIGKILL leaves it: run.json ``running`` with a dead pid, rows of
    the parent (ids 0-4) and of each worker folder (ids 100w-100w+4) in spools."""
    run.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    info = {"run_id": run.name, "status": "running", "pid": int(dead.stdout)}
    (run / records.RUN_FILE).write_text(json.dumps(info))
    _rows(run, range(5))
    for w in range(1, workers + 1):
        part = run / spool.WORKERS_DIR / f"w{w}"
        part.mkdir(parents=True)
        (part / spool.PART_FILE).write_text(json.dumps({**info, "run_id": None}))
        _rows(part, range(100 * w, 100 * w + 5))


def _ids(run: Path) -> list[int]:
    return sorted(pq.read_table(run / records.REQUESTS_FILE).column("request_id").to_pylist())


@pytest.mark.parametrize("workers", [0, 2])
def test_recover_killed_at_every_step_loses_and_doubles_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """Stop ``recover`` at its k-th checkpoint (as a kill would), then recover again: the
    rows are those of one uninterrupted recovery, for every k."""
    want = sorted([*range(5), *(i for w in range(1, workers + 1)
                                for i in range(100 * w, 100 * w + 5))])
    steps = 0
    k = 0
    while True:
        run = tmp_path / f"k{k}"
        _killed_run(run, workers)
        seen = 0

        def stop(step: str, at: int = k) -> None:
            nonlocal seen
            seen += 1
            if seen == at:
                raise _Killed(step)

        monkeypatch.setattr(spool, "_checkpoint", stop)
        try:
            spool.recover(run)
            interrupted = False
        except _Killed:
            interrupted = True
        monkeypatch.setattr(spool, "_checkpoint", lambda step: None)
        spool.recover(run)
        spool.recover(run)  # a third time changes nothing either
        assert _ids(run) == want, f"killed at checkpoint {k}"
        assert not spool.has_spools(run)
        assert json.loads((run / records.RUN_FILE).read_text())["status"] == "killed"
        if k and not interrupted:
            break
        steps = k
        k += 1
    assert steps >= (6 if workers else 3)  # every step of every commit was a kill point


def test_recover_waits_for_a_worker_that_still_writes(tmp_path: Path) -> None:
    from agentbench.errors import InputError
    from agentbench.results.runfolder import recover_if_cut_short

    run = tmp_path / "r"
    _killed_run(run, 1)
    part = run / spool.WORKERS_DIR / "w1" / spool.PART_FILE
    part.write_text(json.dumps({"status": "running", "pid": os.getpid()}))  # alive
    with pytest.raises(InputError, match="worker of the run still writes"):
        recover_if_cut_short(run)
    assert spool.parts_of(run)  # untouched


@pytest.mark.parametrize("workers", [0, 2])
def test_two_readers_recovering_one_killed_run_at_once_lose_and_double_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """A notebook's ``load`` and ``agentbench report`` opening the same killed run at once:
    the second reader starts while the first is between replacing a table and removing
    the spool it consumed. Each row is read exactly once (the second read the new table
    and the old spool together: every row twice; or wrote its own table over the first's
    when the spool was gone under it: rows lost)."""
    import threading

    from agentbench.results.runfolder import recover_if_cut_short

    run = tmp_path / "r"
    _killed_run(run, workers)
    want = sorted([*range(5), *(i for w in range(1, workers + 1)
                                for i in range(100 * w, 100 * w + 5))])
    errors: list[BaseException] = []

    def second_reader() -> None:
        try:
            recover_if_cut_short(run)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    second = threading.Thread(target=second_reader)

    def pause(step: str) -> None:
        if step == "replaced" and not second.is_alive() and second.ident is None:
            second.start()
            second.join(1.0)  # it runs to its end here unless it waits for the first

    monkeypatch.setattr(spool, "_checkpoint", pause)
    recover_if_cut_short(run)
    second.join(30)
    assert not second.is_alive() and not errors
    assert _ids(run) == want
    assert not spool.has_spools(run)
    assert json.loads((run / records.RUN_FILE).read_text())["status"] == "killed"


def _start(sc: Path, new_session: bool) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "agentbench.cli", "run", str(sc),
                             "--no-progress", "--workers", "2"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=new_session)


def _wait_for_worker_rows(run: Path, proc: subprocess.Popen[str]) -> None:
    parts = [run / spool.WORKERS_DIR / f"w{w}" / (records.REQUESTS_FILE + spool.JOURNAL_SUFFIX)
             for w in (0, 1)]
    deadline = time.monotonic() + 90
    while not all(p.exists() and p.stat().st_size > 0 for p in parts):
        assert time.monotonic() < deadline and proc.poll() is None, "run never wrote rows"
        time.sleep(0.05)
    time.sleep(0.3)  # a few more rows each


@pytest.mark.timeout(180)
@pytest.mark.parametrize("whole_group", [False, True])
def test_sigkill_of_a_workers_run_keeps_every_finished_row(
        fast_server: str, weka_dir: Path, tmp_path: Path, whole_group: bool) -> None:
    """SIGKILL of the parent alone (as the OOM killer does; its workers notice and finish
    their files), or of the parent and its workers at once: ``recover`` merges the workers'
    rows, each request once, and ``load`` reads them."""
    import agentbench

    out = tmp_path / "res"
    sc = write_scenario(tmp_path / "s.yaml", fast_server, out, weka_dir,
                        "limits: {duration_s: 600}")
    proc = _start(sc, new_session=whole_group)
    run = out / "r"
    _wait_for_worker_rows(run, proc)
    if whole_group:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while spool.live_part(run) is not None:  # orphaned workers finish their files
        assert time.monotonic() < deadline, "a worker outlived its parent by a minute"
        time.sleep(0.05)
    journaled = 0
    for d in spool.parts_of(run):
        j = d / (records.REQUESTS_FILE + spool.JOURNAL_SUFFIX)
        journaled += len(j.read_bytes().splitlines()) if j.exists() else 0
        p = d / records.REQUESTS_FILE
        journaled += pq.read_metadata(p).num_rows if p.exists() else 0
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "recover", str(run)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "2 worker folders" in res.stdout, res.stdout + res.stderr
    r = agentbench.load(run)
    assert r.requests.request_id.is_unique and len(r.requests) >= journaled > 0
    assert set(r.requests.lane) == {0, 1}
    assert json.loads((run / records.RUN_FILE).read_text())["status"] == "killed"
    assert not (run / spool.WORKERS_DIR).exists()


def test_a_journal_line_that_parses_but_does_not_fit_is_left_out(tmp_path: Path) -> None:
    """Junk that is valid JSON (a missing required column, the wrong type, not a mapping)
    costs its own line only: the run reads with every real row."""
    import agentbench

    run = tmp_path / "r"
    _killed_run(run, 0)
    journal = run / (records.REQUESTS_FILE + spool.JOURNAL_SUFFIX)
    with open(journal, "ab") as f:
        f.write(b'999 {"request_id": 7}\n1000 {"foo": 1}\n1001 [1, 2]\n'
                b'1002 {"request_id": "x", "stage": 5}\n'
                b'1003 {"request_id": 9223372036854775813}\n')  # past int64, within uint64
    assert sorted(agentbench.load(run).requests.request_id) == list(range(5))


def test_a_run_killed_before_its_first_row_reads_as_killed_and_empty(tmp_path: Path) -> None:
    import agentbench

    run = tmp_path / "r"
    _killed_run(run, 0)
    for f in run.iterdir():
        if f.name != records.RUN_FILE:
            f.unlink()  # no row had finished: nothing but run.json
    r = agentbench.load(run)
    assert len(r.requests) == 0 and r.summary["overall"]["requests"]["total"] == 0
    assert json.loads((run / records.RUN_FILE).read_text())["status"] == "killed"


@pytest.mark.parametrize("whose", ["another host", "a live pid"])
def test_recover_force_finishes_a_run_whose_pid_cannot_tell(tmp_path: Path,
                                                            whose: str) -> None:
    """A run copied from another host, or whose pid now belongs to another process, reads
    as still in progress (one line naming the way out); ``recover --force`` finishes it."""
    run = tmp_path / "r"
    _killed_run(run, 1)
    info = json.loads((run / records.RUN_FILE).read_text())
    info.update({"host": {"hostname": "elsewhere"}} if whose == "another host"
                else {"pid": os.getpid()})
    (run / records.RUN_FILE).write_text(json.dumps(info))
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "report", str(run)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "still in progress" in lines[0]
    assert "recover --force" in lines[0] and ("elsewhere" in lines[0]) == (whose != "a live pid")
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "recover", "--force",
                          str(run)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "1 worker folder" in res.stdout, res.stdout + res.stderr
    assert _ids(run) == [*range(5), *range(100, 105)]
    assert json.loads((run / records.RUN_FILE).read_text())["status"] == "killed"


def _cut_run_json(run: Path, pid: int, half: bool) -> bytes:
    """run.json laid out as the run writes it (host and scenario first, status and pid
    after them), cut to half its bytes or, not ``half``, just after its pid; the bytes
    left."""
    info = {"run_id": run.name, "host": {"hostname": socket.gethostname()},
            "scenario": {"name": "cut", "notes": ["x" * 60] * 20}, "status": "running",
            "pid": pid, "stages": []}
    text = json.dumps(info, indent=2).encode()
    cut = text[:len(text) // 2 if half else text.index(b'"stages"')]
    (run / records.RUN_FILE).write_bytes(cut)
    return cut


@pytest.mark.parametrize("workers", [0, 2])
def test_a_cut_short_run_json_does_not_block_recover(tmp_path: Path, workers: int) -> None:
    """A killed run whose run.json is cut to half its bytes (its pid with it): recover
    keeps the damaged file as run.json.bad, writes a new run.json (``killed``) and the
    tables from the spools and journals, each row once, and says so in one line. Before,
    recover, load and report refused the run ("not valid JSON"), its rows only in the
    spool."""
    import agentbench
    from agentbench.errors import InputError

    run = tmp_path / "r"
    _killed_run(run, workers)
    cut = _cut_run_json(run, pid=2**40, half=True)
    with pytest.raises(InputError, match="agentbench recover"):
        agentbench.load(run)  # a reader that is not recover changes nothing
    assert not (run / records.REQUESTS_FILE).exists()
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "recover", str(run)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 0 and len(lines) == 1, res.stdout + res.stderr
    assert "run.json: not valid JSON" in lines[0] and "kept as run.json.bad" in lines[0]
    assert "status killed" in lines[0] and "recovered requests.parquet" in res.stdout
    assert (run / "run.json.bad").read_bytes() == cut
    want = sorted([*range(5), *(i for w in range(1, workers + 1)
                                for i in range(100 * w, 100 * w + 5))])
    assert _ids(run) == want and not spool.has_spools(run)
    info = json.loads((run / records.RUN_FILE).read_text())
    assert info["status"] == "killed" and info["damaged_run_json"]["kept_as"] == "run.json.bad"
    assert sorted(agentbench.load(run).requests.request_id) == want


def test_a_cut_short_run_json_that_still_names_a_live_writer_is_not_recovered(
        tmp_path: Path) -> None:
    """Cut after its pid, the damaged run.json still says who writes the run: a live
    writer's run is refused as any run in progress is, and nothing changes."""
    from agentbench.cli import app

    run = tmp_path / "r"
    _killed_run(run, 0)
    cut = _cut_run_json(run, pid=os.getpid(), half=False)
    res = CliRunner().invoke(app, ["recover", str(run)])
    assert res.exit_code == 2 and "still in progress" in res.output, res.output
    assert (run / records.RUN_FILE).read_bytes() == cut
    assert not (run / "run.json.bad").exists() and spool.has_spools(run)


def test_a_pid_cut_short_is_not_read_as_a_writer(tmp_path: Path) -> None:
    """run.json cut inside the digits of its pid: what is left of them (here this test's
    own pid, alive) is not the writer's, so the run is recovered as any whose pid was lost.
    Before, recover read the digits left as the pid and refused: "still in progress (pid
    N)", naming a process that never wrote the run."""
    from agentbench.cli import app
    from agentbench.results.runfolder import salvaged_run_json

    run = tmp_path / "r"
    _killed_run(run, 0)
    mine = str(os.getpid()).encode()
    pid = int(mine + b"0000000")  # past any pid_max: the writer is gone
    cut = _cut_run_json(run, pid=pid, half=False)
    text = cut[:cut.index(b'"pid": ') + len(b'"pid": ') + len(mine)]
    (run / records.RUN_FILE).write_bytes(text)
    assert salvaged_run_json(run)["pid"] is None
    res = CliRunner().invoke(app, ["recover", str(run)])
    assert res.exit_code == 0 and "kept as run.json.bad" in res.output, res.output
    assert json.loads((run / records.RUN_FILE).read_text())["status"] == "killed"
    assert _ids(run) == list(range(5)) and not spool.has_spools(run)


def test_a_folder_holding_only_a_runs_claim_says_so(tmp_path: Path) -> None:
    """A run stopped (SIGTERM before its handler, SIGKILL) in the instant after it took
    its folder and before run.json: the folder holds its claim alone. recover said "no
    run.json" and report "requests.parquet: file not found"; each now says what the
    folder is, in one line."""
    import agentbench
    from agentbench.cli import app
    from agentbench.errors import InputError
    from agentbench.results.rundir import CLAIM_FILE

    run = tmp_path / "r"
    run.mkdir()
    (run / CLAIM_FILE).touch()
    for args in (["recover", str(run)], ["report", str(run), "-o", str(tmp_path / "rep")]):
        res = CliRunner().invoke(app, args)
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert "holds only the claim of a run stopped before it wrote run.json" in lines[0]
    with pytest.raises(InputError, match="nothing was sent"):
        agentbench.load(run)
    assert sorted(p.name for p in run.iterdir()) == [CLAIM_FILE]  # left as it was


def test_gate_names_a_recovered_damaged_run_json(tmp_path: Path) -> None:
    """A run recovered from a damaged run.json lost its scenario: the gate's refusal says
    that, not "not a run agentbench wrote"."""
    from agentbench.cli import app

    run = tmp_path / "r"
    _killed_run(run, 0)
    _cut_run_json(run, pid=2**40, half=True)
    assert CliRunner().invoke(app, ["recover", str(run)]).exit_code == 0
    res = CliRunner().invoke(app, ["gate", str(run), str(run)])
    assert res.exit_code == 2, res.output
    assert "its run.json was damaged (kept as run.json.bad)" in res.output, res.output


@pytest.mark.parametrize("table", [records.REQUESTS_FILE, records.SESSIONS_FILE])
def test_recover_names_a_damaged_table_it_cannot_rebuild(tmp_path: Path, table: str) -> None:
    """A run that needs no recovery, one of whose tables was cut afterwards: recover says
    which and why nothing can rebuild it (it said "nothing to recover", exit 0)."""
    from agentbench.cli import app

    run = tmp_path / "r"
    _killed_run(run, 0)
    first = CliRunner().invoke(app, ["recover", str(run)])
    assert first.exit_code == 0 and "recovered" in first.output, first.output
    again = CliRunner().invoke(app, ["recover", str(run)])
    assert again.exit_code == 0 and "nothing to recover" in again.output, again.output
    path = run / table
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    res = CliRunner().invoke(app, ["recover", str(run)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert f"{path}: not a readable parquet file" in lines[0]
    assert "nothing is left to rebuild it from" in lines[0]


def test_recover_names_a_requests_table_deleted_after_the_run(tmp_path: Path) -> None:
    """A run that needs no recovery whose requests.parquet was deleted since (by hand, a
    copy that left it out): recover said "nothing to recover", exit 0, while report, gate
    and load each said the file was not found. It now says so itself, exit 2."""
    from agentbench.cli import app

    run = tmp_path / "r"
    _killed_run(run, 0)
    assert CliRunner().invoke(app, ["recover", str(run)]).exit_code == 0
    (run / records.REQUESTS_FILE).unlink()
    res = CliRunner().invoke(app, ["recover", str(run)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert f"{run / records.REQUESTS_FILE}: file not found" in lines[0]
    assert "nothing is left to rebuild it from" in lines[0]


def test_recover_goes_on_past_a_damaged_table_to_the_runs_after_it(tmp_path: Path) -> None:
    """``recover DAMAGED KILLED``: the damaged run's line, then the killed run recovered,
    exit 2 at the end (the damaged run's refusal stopped the command, and the killed run
    after it was left cut short)."""
    from agentbench.cli import app

    damaged, killed = tmp_path / "d", tmp_path / "k"
    _killed_run(damaged, 0)
    assert CliRunner().invoke(app, ["recover", str(damaged)]).exit_code == 0
    path = damaged / records.REQUESTS_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _killed_run(killed, 0)
    res = CliRunner().invoke(app, ["recover", str(damaged), str(killed)])
    assert res.exit_code == 2, res.output
    assert f"error: {path}: not a readable parquet file" in res.output
    assert f"{killed}: recovered requests.parquet" in res.output, res.output
    assert (killed / records.REQUESTS_FILE).exists()


@pytest.mark.parametrize("name", ["../victim.txt", "ABS", "workers/out/victim.txt"])
def test_a_commit_marker_naming_a_file_outside_the_run_removes_nothing(tmp_path: Path,
                                                                       name: str) -> None:
    """A commit marker that names a file outside the run folder (``..``, an absolute path,
    a worker folder that is a link out) is no commit agentbench makes: every reader
    removed that file, without a word (a run folder from elsewhere could delete the
    reader's files). Now one line naming the marker, exit 2, nothing changed; once the
    marker is gone the run recovers with every row."""
    import agentbench
    from agentbench.cli import app
    from agentbench.errors import InputError

    run = tmp_path / "r"
    _killed_run(run, 1)
    outside = tmp_path / "out"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious")
    (run / spool.WORKERS_DIR / "out").symlink_to(outside)
    (tmp_path / "victim.txt").write_text("precious")
    named = str(victim) if name == "ABS" else name
    marker = run / (records.REQUESTS_FILE + spool.COMMIT_SUFFIX)
    marker.write_text(json.dumps([named]))
    res = CliRunner().invoke(app, ["recover", str(run)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert str(marker) in lines[0] and "outside the run folder" in lines[0]
    with pytest.raises(InputError, match="outside the run folder"):
        agentbench.load(run)
    assert victim.read_text() == (tmp_path / "victim.txt").read_text() == "precious"
    marker.unlink()
    (run / spool.WORKERS_DIR / "out").unlink()
    assert CliRunner().invoke(app, ["recover", str(run)]).exit_code == 0
    assert _ids(run) == [*range(5), *range(100, 105)]
