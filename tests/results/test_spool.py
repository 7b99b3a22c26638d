"""``agentbench.results.spool``: whether a run's writer still runs, from run.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.results import schema as records
from agentbench.results.spool import writer_alive
from tests.helpers import req, write_run


@pytest.mark.parametrize("pid", [0, -1, True, 2**70, -2**70])
def test_a_pid_no_process_can_have_is_no_live_writer(pid: int) -> None:
    """A damaged run.json's pid: 0 and -1 name a process group and every process to
    ``os.kill`` (so the run read as in progress forever), a number past C's long raised
    OverflowError (a traceback from report, gate and load)."""
    assert writer_alive({"status": "running", "pid": pid}) is False
    assert writer_alive({"status": "running", "pid": os.getpid()}) is True


def test_a_run_json_with_an_impossible_pid_is_recovered_as_killed(tmp_path: Path) -> None:
    d = write_run(tmp_path / "r", [req(sent_ns=0, end_ns=1)])
    info = json.loads((d / records.RUN_FILE).read_text())
    (d / records.RUN_FILE).write_text(json.dumps({**info, "status": "running",
                                                  "pid": 2**70}))
    res = CliRunner().invoke(app, ["report", str(d)])
    assert res.exit_code == 0, res.output
    assert json.loads((d / records.RUN_FILE).read_text())["status"] == "killed"


def test_a_writer_killed_but_not_reaped_is_no_live_writer() -> None:
    """A run killed from a notebook (``p.kill()`` without ``p.wait()``), or in a container
    whose init reaps nothing, leaves its process a zombie until its parent waits for it:
    ``os.kill(pid, 0)`` still finds it, so ``load``, ``report`` and ``gate`` said the run
    was still in progress and only ``recover --force`` read it."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        p.kill()
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
        assert writer_alive({"status": "running", "pid": p.pid}) is False
    finally:
        p.wait()
