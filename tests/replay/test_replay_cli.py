"""``agentbench run``: a scenario file in, results and a summary out; Ctrl-C leaves every
finished request on disk and run.json written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.results import schema as records
from tests.helpers import ROOT, write_scenario


@pytest.mark.timeout(120)
def test_run_command_writes_results_and_prints_a_summary(fast_server, weka_dir, tmp_path):  # type: ignore[no-untyped-def]
    sc = write_scenario(tmp_path / "s.yaml", fast_server, tmp_path / "res", weka_dir,
                        "limits: {max_requests: 30}")
    res = CliRunner().invoke(app, ["run", str(sc), "--no-progress"])
    assert res.exit_code == 0, res.output
    run_dir = tmp_path / "res" / "r"
    assert f"results: {run_dir}" in res.output
    assert "TTFT" in res.output
    req = pq.read_table(run_dir / records.REQUESTS_FILE)
    assert req.num_rows == 30
    assert (run_dir / records.SUMMARY_FILE).exists() or "minimal" in res.output
    run = json.loads((run_dir / records.RUN_FILE).read_text())
    assert run["status"] == "completed"
    assert run["endpoints"][0]["notes"][0] == "ignore_eos probe: accepted"
    assert run["endpoints"][0]["modeled_gpus"] is None  # a real endpoint: not known


def test_a_virtual_run_records_the_gpus_its_simulator_models(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(app, ["run", str(ROOT / "scenarios" / "quickstart.yaml"),
                                   "--no-progress", "-o", str(tmp_path), "--run-id", "q",
                                   "--set", "hardware.gpus=1", "--set",
                                   "limits.max_sessions=2"])
    assert res.exit_code == 0, res.output
    run = json.loads((tmp_path / "q" / records.RUN_FILE).read_text())
    assert run["endpoints"][0]["modeled_gpus"] == 4  # 4 instances of a 1-GPU preset
    assert "hardware.gpus is 1 but the simulated endpoints model 4 GPUs" in res.output


def test_run_command_bad_scenario_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nendpoints: []\nload: {kind: lanes, concurrency: 0}\n")
    res = CliRunner().invoke(app, ["run", str(bad)])
    assert res.exit_code == 2
    assert "error:" in res.output


@pytest.mark.timeout(120)
def test_ctrl_c_leaves_finished_requests_on_disk(fast_server, weka_dir, tmp_path):  # type: ignore[no-untyped-def]
    out = tmp_path / "res"
    sc = write_scenario(tmp_path / "s.yaml", fast_server, out, weka_dir,
                        "limits: {duration_s: 600}")
    # SIGINT as a terminal delivers it, even when the test run itself was started in the
    # background of a script (which leaves SIGINT ignored in every child)
    proc = subprocess.Popen([sys.executable, "-m", "agentbench.cli", "run", str(sc),
                             "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    spool = out / "r" / (records.REQUESTS_FILE + ".spool.arrows")
    deadline = time.monotonic() + 60
    while not (spool.exists() and spool.stat().st_size > 0):  # first batch of rows written
        assert time.monotonic() < deadline and proc.poll() is None, "run never wrote rows"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    run = json.loads((out / "r" / records.RUN_FILE).read_text())
    assert run["status"] == "interrupted" and run["end_wall"]
    req = pq.read_table(out / "r" / records.REQUESTS_FILE).to_pandas()
    assert len(req) >= 1 and run["requests_written"] == len(req)
    assert not spool.exists()


def test_a_run_the_pre_run_check_refuses_names_no_results_folder(weka_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Nobody answers at the endpoint: one error line, and no ``results:`` line naming a
    folder that is removed at once (it came before the check)."""
    from tests.helpers import free_port

    sc = write_scenario(tmp_path / "s.yaml", f"http://127.0.0.1:{free_port()}",
                        tmp_path / "res", weka_dir, "limits: {max_requests: 3}")
    res = CliRunner().invoke(app, ["run", str(sc), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "cannot reach" in res.output
    assert "results:" not in res.output
    assert not (tmp_path / "res" / "r").exists()
