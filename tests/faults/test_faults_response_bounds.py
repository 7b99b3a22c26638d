"""A server that sends too much, as a user meets it (agentbench run in its own process
against the fault server): usage counts past any sane size, an answer that never ends.
Every request the server saw has one row, the run ends near its deadline, and
``agentbench report`` reads it."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import agentbench, report_reads, rows, run_cli, scenario


@pytest.mark.timeout(120)
def test_usage_past_any_sane_count_keeps_every_row(tmp_path: Path, fault_server: Any) -> None:
    """``usage`` of 2**70 tokens once raised OverflowError in the writer (exit 1, the row
    lost) and 10**12 tokens for a small prompt was believed: now both rows are kept, their
    usage counted as impossible and named in the terminal summary."""
    srv = fault_server("ok,huge_usage,absurd_usage")
    sc = scenario(tmp_path, srv.url, lanes=2, limits="max_requests: 6")
    r = run_cli("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    run = tmp_path / "out" / "r"
    req = rows(run)
    seen = srv.seen()
    assert len(req) == len(seen) == 6
    assert set(req.status) == {"ok"}
    summary = json.loads((run / "summary.json").read_text())
    n_bad = sum(f != "ok" for _, f, _ in seen)
    assert summary["overall"]["requests"]["usage_invalid"] == n_bad == 4
    assert "over 2**31" in r.stdout
    report_reads(run, tmp_path)


@pytest.mark.timeout(120)
def test_an_answer_that_never_ends_is_an_error_row_and_the_run_ends_near_its_deadline(
        tmp_path: Path, fault_server: Any) -> None:
    """An endless SSE line and an endless stream of events under ``duration_s: 3`` (and
    ``on_deadline: finish``, the default, which lets requests in flight end): each ends as
    a ``response_too_large`` row at its byte cap, so the run ends seconds after its
    deadline. Before, the line grew to gigabytes and the run never ended."""
    srv = fault_server("endless_line,endless_stream,ok")
    sc = scenario(tmp_path, srv.url, lanes=2, limits="duration_s: 3")
    t0 = time.monotonic()
    p = agentbench("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r",
                   "--no-progress")
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("the run did not end within 17 s of its 3 s deadline")
    took = time.monotonic() - t0
    assert "Traceback" not in err, err
    assert p.returncode in (0, 1), err
    assert took < 3 + 15, took
    run = tmp_path / "out" / "r"
    req = rows(run)
    seen = srv.seen()
    assert len(req) == len(seen)
    # an endless answer ends at its cap (one the hogged server started too late may
    # stall first); nothing else goes wrong
    errors = Counter(e if isinstance(e, str) else None for e in req.error_type)
    n_endless = sum(f.startswith("endless") for _, f, _ in seen)
    assert set(errors) <= {"response_too_large", "stall_timeout", None}, errors
    assert 1 <= errors["response_too_large"] <= n_endless, (errors, n_endless)
    msgs = req[req.error_type == "response_too_large"].error_message
    assert msgs.str.contains("was cut off").all()
    report_reads(run, tmp_path)
