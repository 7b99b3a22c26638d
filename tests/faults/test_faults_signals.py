"""agentbench stopped from outside mid-run (SIGINT, SIGTERM, two Ctrl-C 10 ms apart,
SIGKILL) while streams are in flight: the rows, the exit code, and a run that every reader
reads."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from agentbench.replay.sigterm import STOPPED
from tests.faults.harness import (
    agentbench,
    report_reads,
    rows,
    run_json,
    scenario,
    sigint_default,
    wait_for,
)


def _start(tmp_path: Path, srv: Any, *extra: str) -> Any:
    # 8 lanes of ~1 s streams (ITL 10 ms): requests are always in flight
    sc = scenario(tmp_path, srv.url, lanes=8, limits="duration_s: 120")
    return agentbench("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r", *extra)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("sig", "code", "workers"), [
    (signal.SIGINT, 130, "1"), (signal.SIGTERM, 143, "1"),
    # the workers' cancelled rows say the parent's reason too (they said the generic stop)
    (signal.SIGTERM, 143, "2")])
def test_an_interrupted_run_has_a_row_for_every_request_the_server_saw(
        tmp_path: Path, fault_server: Any, sig: int, code: int, workers: str) -> None:
    srv = fault_server(itl=0.01)
    p = _start(tmp_path, srv, "--workers", workers)
    wait_for(lambda: len(srv.done_ns()) >= 12, 60)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    assert "Traceback" not in err
    # the last word says why it stopped (a Ctrl-C ended silently: typer's exit 130)
    assert err.strip().splitlines()[-1] == ("terminated" if sig == signal.SIGTERM
                                            else "interrupted"), err
    run = tmp_path / "out" / "r"
    req = rows(run)
    assert len(req) == len(srv.seen())  # finished ones and the cancelled in-flight ones
    assert (req.status == "cancelled").sum() >= 1
    # the cancelled rows say why: no deadline cut them (they read "cancelled at the
    # deadline", as a run's bound does)
    why = ("the run was stopped by SIGTERM" if sig == signal.SIGTERM else STOPPED)
    assert set(req.error_message[req.status == "cancelled"]) == {f"cancelled: {why}"}
    assert run_json(run)["status"] == "interrupted"
    report_reads(run, tmp_path)


@pytest.mark.timeout(120)
def test_two_ctrl_c_10_ms_apart_still_leave_a_readable_run(tmp_path: Path,
                                                           fault_server: Any) -> None:
    srv = fault_server(itl=0.01)
    p = _start(tmp_path, srv)
    wait_for(lambda: len(srv.done_ns()) >= 12, 60)
    p.send_signal(signal.SIGINT)
    time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0
    run = tmp_path / "out" / "r"
    req = rows(run)
    done_before = len(srv.done_ns())
    assert done_before - 8 <= len(req) <= len(srv.seen())
    report_reads(run, tmp_path)


@pytest.mark.timeout(120)
def test_sigkill_keeps_every_finished_request(tmp_path: Path, fault_server: Any) -> None:
    """No chance to clean up: the journal has each row the moment its request ended, so
    every request the server had finished 0.1 s before the kill has a row, and the run is
    recovered by the first reader (status ``killed``)."""
    srv = fault_server(itl=0.01)
    p = _start(tmp_path, srv)
    wait_for(lambda: len(srv.done_ns()) >= 20, 60)
    t_kill = time.time_ns()
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    finished_before = sum(t < t_kill - 100_000_000 for t in srv.done_ns())
    run = tmp_path / "out" / "r"
    req = rows(run)  # agentbench.load recovers the spool and the journal
    ok = req[req.status == "ok"]
    assert finished_before <= len(ok) <= len(req) <= len(srv.seen())
    assert run_json(run)["status"] == "killed"
    # the 8 trees in progress at the kill have no end: cut, never counted as completed
    import agentbench

    r = agentbench.load(run)
    agents = r.summary["overall"]["agents"]
    roots_done = int(((r.sessions.relation == "root") & (r.sessions.status == "ok")).sum())
    assert agents["completed"] <= roots_done and agents["cut"] >= 1
    report_reads(run, tmp_path)
    text = (tmp_path / "report-r" / "report.md").read_text()
    assert "did not complete (status: killed)" in text


_SIGTERM_IN_FINISH = """
import os, signal, sys
from agentbench.cli import main
from agentbench.replay import runner

real = runner._Run._finish
mid_run = sys.argv.pop(1) == "mid-run"
SIG = getattr(signal, sys.argv.pop(1))

async def finish(self, status):
    os.kill(os.getpid(), SIG)  # as a second signal to the group, or a second Ctrl-C, would
    await real(self, status)

runner._Run._finish = finish
if mid_run:  # the first SIGTERM while the run goes on
    real_open = runner._Run._open

    async def opened(self, auto):
        await real_open(self, auto)
        import asyncio
        asyncio.get_running_loop().call_later(30, os.kill, os.getpid(), SIG)

    runner._Run._open = opened
sys.argv = ["agentbench", *sys.argv[1:]]
main()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("first", ["mid-run", "none"])
@pytest.mark.parametrize(("sig", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_while_the_files_are_written_waits_for_them(tmp_path: Path, first: str,
                                                             sig: str, code: int) -> None:
    """``timeout`` and process managers signal the process and then its group, and a
    person presses Ctrl-C twice: a SIGTERM or SIGINT that comes while a run's files are
    written (after a first one, or at the end of a run) no longer stops the process
    half-way (run.json left ``running``: a second Ctrl-C did until 2026-12-06); the run is
    whole, and the process stops (143, 130) before any later variant."""
    import subprocess
    import sys

    sc = Path(__file__).resolve().parents[2] / "scenarios" / "shared-kv-what-if.yaml"
    p = subprocess.run([sys.executable, "-c", _SIGTERM_IN_FINISH, first, sig, "run",
                        str(sc), "-o", str(tmp_path / "out"), "--no-progress"],
                       capture_output=True, text=True, timeout=110,
                       preexec_fn=sigint_default)  # a test run in a script's background
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr
    runs = sorted((tmp_path / "out").iterdir())
    assert len(runs) == 1  # the sweep's later variants did not start
    info = run_json(runs[0])
    assert info["status"] == ("interrupted" if first == "mid-run" else "completed")
    assert not [f for f in runs[0].iterdir() if f.suffix in (".jsonl", ".arrows", ".tmp")]
    req = rows(runs[0])
    assert len(req) == info["requests_written"] > 0


@pytest.mark.timeout(120)
def test_recover_force_refuses_a_run_agentbench_still_writes(tmp_path: Path,
                                                             fault_server: Any) -> None:
    """``recover --force`` (the "still in progress" line names it) on a run whose writer
    is alive and is agentbench finished its files under it: the run kept 31 of the 80
    requests the server finished, said completed and warned of nothing. Refused now, in
    one line naming the pid, and the run keeps every row."""
    from tests.faults.harness import run_cli

    srv = fault_server(itl=0.01)
    sc = scenario(tmp_path, srv.url, lanes=4, limits="max_requests: 200")
    p = agentbench("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r")
    wait_for(lambda: len(srv.done_ns()) >= 5, 60)
    res = run_cli("recover", "--force", str(tmp_path / "out" / "r"))
    still = p.poll() is None
    _, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    assert still, "the run ended before --force came: nothing was checked"
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert f"agentbench (pid {p.pid}) still writes this run" in lines[0]
    assert len(rows(tmp_path / "out" / "r")) == 200 == len(srv.seen())
    assert run_json(tmp_path / "out" / "r")["status"] == "completed"


@pytest.mark.timeout(120)
def test_sigterm_before_the_run_began_ends_in_one_line_and_leaves_no_folder(
        tmp_path: Path) -> None:
    """A SIGTERM while the run still makes its trace (before its own handler): the signal's
    default action killed the process there (exit -15, nothing said), and one in the
    instant after it took its folder left the folder holding its claim alone. Now the
    process ends through its cleanup: "terminated", exit 143, no traceback, no folder."""
    sc = tmp_path / "big.yaml"
    sc.write_text("name: big\nendpoints: [{kind: simulated}]\n"
                  "trace: {kind: synth, profile: codex, sessions: 20000}\n"
                  "load: {kind: lanes, concurrency: 2}\nlimits: {max_requests: 10}\n")
    p = agentbench("run", str(sc), "-o", str(tmp_path / "out"), "--no-progress")
    time.sleep(3)  # past the imports, inside the trace's synthesis (about 25 s)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, (p.returncode, err)
    assert err.strip() == "terminated" and "Traceback" not in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.timeout(120)
def test_ctrl_c_of_a_command_says_interrupted(tmp_path: Path) -> None:
    """Ctrl-C of a command other than a run (here ``traces synth`` of a large trace):
    "interrupted", exit 130, and no half-written file. typer turned the KeyboardInterrupt
    into a silent exit 130, so nothing said why the command stopped."""
    out = tmp_path / "big.parquet"
    p = agentbench("traces", "synth", "-n", "3000000", "--profile", "codex", "-o", str(out))
    time.sleep(3)  # past the imports, inside the synthesis (about 20 s)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, (p.returncode, err)
    assert err.strip() == "interrupted", err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(120)
def test_ctrl_c_stops_serve_sim_as_it_says_exit_0(tmp_path: Path) -> None:
    """serve-sim says "Ctrl-C stops it": that is its way to end, exit 0 and nothing on
    stderr (as ``record``), not an interrupted command's 130."""
    from tests.helpers import accepts, free_port

    port = free_port()
    p = agentbench("serve-sim", "--port", str(port))
    wait_for(lambda: accepts(port), 30)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert (p.returncode, err) == (0, ""), (p.returncode, err)
    assert "Ctrl-C stops it" in out


def test_a_run_stopped_before_its_run_json_leaves_no_claimed_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped between taking its folder and writing run.json (SIGTERM as the CLI raises
    it, Ctrl-C, an error): the folder, holding only its claim, is removed."""
    import agentbench.replay.runner as runner
    from agentbench.cli import Terminated
    from agentbench.scenario.loading import expand_variants, load_scenario
    from tests.helpers import ROOT

    sc = expand_variants(load_scenario(ROOT / "scenarios" / "quickstart.yaml"))[0]
    sc.output.dir = str(tmp_path / "out")

    def stopped(*_a: Any, **_k: Any) -> None:
        assert [p.name for p in (tmp_path / "out").iterdir()]  # the folder was taken
        raise Terminated

    monkeypatch.setattr(runner, "run_info", stopped)
    with pytest.raises(Terminated):
        runner._Run(sc, runner.load_trace(sc), 1, 1, None)
    assert not any((tmp_path / "out").iterdir())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("finished", [2, 1])
def test_ctrl_c_during_repeats_prints_the_runs_that_finished(
        tmp_path: Path, fault_server: Any, finished: int) -> None:
    """Ctrl-C during ``run --repeat 3`` exited 130 with each finished run's summary but
    not its figures over them, which ``search`` prints of its finished probes: now the
    figures with their intervals over the runs that finished (2), or how many finished
    (1: no interval), on stdout, then "interrupted", exit 130."""
    import json

    srv = fault_server(itl=0.01)
    sc = scenario(tmp_path, srv.url, lanes=4, limits="duration_s: 3")
    p = agentbench("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r",
                   "--repeat", "3", "--no-progress")
    # the run after the last to finish has begun (its run.json): each lasts 3 s
    cut = tmp_path / "out" / f"r-rep{finished + 1:02d}" / "run.json"
    wait_for(cut.exists, 60)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err, err
    assert json.loads(cut.read_text())["status"] == "interrupted"
    head = f"faults: {finished} of 3 runs finished before the stop"
    if finished == 2:
        assert f"\n{head} (mean and 95% interval of the mean)\n" in out, out
        tail = out.split(head, 1)[1]
        assert "throughput " in tail and "95% CI [" in tail and "(n=2)" in tail, out
    else:
        assert out.rstrip().endswith(f"{head}: no interval under 2 runs"), out
