"""Server trouble, as a user meets it: agentbench run (its own process) against a fault
server (its own process). Every case: one row per request the server saw, the exit code,
and a run that ``agentbench report`` reads."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentbench.testing.fakeserver import REDIRECT_TO
from tests.faults.harness import (
    agentbench,
    report_reads,
    rows,
    run_cli,
    run_json,
    scenario,
    six_requests,
    wait_for,
)

#: the row each server fault becomes (status, error_type)
EXPECTED = {
    "ok": ("ok", None),
    "http500": ("error", "http_500"),
    "http429": ("error", "http_429"),
    "http400": ("error", "http_400"),
    "redirect": ("error", "http_307"),
    "reset": ("error", "disconnected"),
    "stall": ("error", "stall_timeout"),
    "malformed": ("error", "malformed_sse"),
    "error_event": ("error", "stream_error"),
    "no_done": ("error", "incomplete_stream"),
    "no_usage": ("ok", None),
    "bad_usage": ("ok", None),
}


def _results(tmp_path: Path) -> Path:
    return tmp_path / "out" / "r"


@pytest.mark.timeout(180)
def test_every_server_fault_is_one_row_and_the_run_reads(tmp_path: Path,
                                                         fault_server: Any) -> None:
    faults = list(EXPECTED)
    srv = fault_server(",".join(faults))
    sc = scenario(tmp_path, srv.url, limits=f"max_requests: {2 * len(faults)}")
    r = run_cli("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r")
    assert r.returncode == 0, r.stderr  # failures are data; some requests succeeded
    assert "of measured requests failed" in r.stderr  # but a warning says how many
    req = rows(_results(tmp_path))
    seen = srv.seen()
    assert len(req) == len(seen) == 2 * len(faults)
    got = Counter((s, e if isinstance(e, str) else None)
                  for s, e in zip(req.status, req.error_type, strict=True))
    want = Counter(EXPECTED[f] for _, f, _ in seen)
    assert got == want
    # the redirect is an error naming where it pointed; nothing was sent there
    redirected = req[req.error_type == "http_307"]
    assert redirected.error_message.str.contains(REDIRECT_TO, regex=False).all()
    # impossible usage (more cached than prompt tokens) is counted and left out
    summary = __import__("json").loads((_results(tmp_path) / "summary.json").read_text())
    n_bad = sum(f == "bad_usage" for _, f, _ in seen)
    assert summary["overall"]["requests"]["usage_invalid"] == n_bad
    assert "usage" in r.stdout
    report_reads(_results(tmp_path), tmp_path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_vllm_error_event_is_a_stream_error_keeping_its_message(
        tmp_path: Path, fault_server: Any, api: str) -> None:
    """vLLM writes a failure mid-stream as its ErrorResponse (``data: {"object":"error",
    "message":...}``, no ``error`` object), then ends the body: a ``stream_error`` row with
    the message, as OpenAI's error event (it was ``incomplete_stream``, the message lost)."""
    run, req = six_requests(tmp_path, fault_server, "ok,vllm_error_event", api)
    failed = req[req.status == "error"]
    assert list(failed.error_type) == ["stream_error"] * 3
    assert failed.error_message.str.contains("engine died", regex=False).all()
    assert (req[req.status == "ok"].error_type.isna()).all()
    report_reads(run, tmp_path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_an_error_event_ends_a_stream_whose_body_goes_on(
        tmp_path: Path, fault_server: Any, api: str) -> None:
    """The server says why in an error event, then neither ends the body nor closes: the
    request waited for the stall timeout (120 s by default, its lane held) and its row
    was ``stall_timeout``, the server's message lost. An error event is the stream's last
    now, as ``[DONE]`` is: the request ends half a second after it, the server's
    ``stream_error`` with its message."""
    t0 = time.monotonic()
    run, req = six_requests(tmp_path, fault_server, "ok,error_then_hang", api, stall_s=20)
    assert time.monotonic() - t0 < 15  # three waits of 20 s on two lanes took 40 s
    failed = req[req.status == "error"]
    assert list(failed.error_type) == ["stream_error"] * 3
    assert failed.error_message.str.contains("engine died", regex=False).all()
    assert not failed.error_message.str.contains("stall", regex=False).any()
    # the end stamped at the error event's read, as a [DONE]'s is (a request whose
    # error came before any token has no token stamp to compare with)
    assert ((failed.end_ns - failed.last_token_ns).dropna() < 100_000_000).all()
    report_reads(run, tmp_path)


@pytest.mark.timeout(120)
def test_a_run_where_nothing_succeeded_exits_1_naming_the_error(tmp_path: Path,
                                                              fault_server: Any) -> None:
    srv = fault_server("http400")
    sc = scenario(tmp_path, srv.url, limits="max_requests: 12")
    r = run_cli("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r")
    assert r.returncode == 1
    assert "http_400" in r.stderr and "Traceback" not in r.stderr
    assert len(rows(_results(tmp_path))) == len(srv.seen()) == 12
    report_reads(_results(tmp_path), tmp_path)


@pytest.mark.timeout(120)
def test_429_retry_after_is_honoured_and_each_attempt_is_a_row(tmp_path: Path,
                                                               fault_server: Any) -> None:
    srv = fault_server("http429,ok")  # Retry-After: 0.2 s
    sc = scenario(tmp_path, srv.url, lanes=1, limits="max_requests: 8",
                  extra_endpoint="retry: {max_attempts: 3}")
    r = run_cli("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r")
    assert r.returncode == 0, r.stderr
    req = rows(_results(tmp_path)).sort_values("sent_ns")
    assert len(req) == len(srv.seen()) == 8
    assert list(req.status) == ["error", "ok"] * 4
    gaps = np.diff(req.sent_ns.to_numpy())[::2] / 1e9  # 429 -> its retry
    assert (gaps >= 0.2).all()
    report_reads(_results(tmp_path), tmp_path)


@pytest.mark.timeout(180)
def test_a_server_killed_and_restarted_costs_no_budget_and_no_spinning(
        tmp_path: Path, fault_server: Any) -> None:
    """The server dies mid-run (streams in flight break) and comes back 1.5 s later on the
    same port: the requests it saw each have a row, the refused tries are a handful of
    rows (backoff, not ~1,600 a second), and max_requests still buys that many requests
    that reached a server."""
    srv = fault_server(itl=0.005)
    budget = 60
    sc = scenario(tmp_path, srv.url, limits=f"max_requests: {budget}")
    p = agentbench("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r")
    wait_for(lambda: len(srv.seen()) >= 10, 60)
    srv.kill()
    first_seen = len(srv.seen())
    time.sleep(1.5)
    srv.start()  # same port, same log
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    req = rows(_results(tmp_path))
    refused = req[req.error_type == "connect_error"]
    # a request whose connection the dying server had accepted but not yet read (so not
    # logged) is a row too: disconnected, with no HTTP status. Not one per lane at most:
    # a lane whose request was cut sends its next turn at once (no backoff: the
    # connection had opened), and a dying server can accept that one too (seen: two in a
    # row on one lane, on a loaded host)
    unanswered = req[(req.error_type == "disconnected") & req.http_status.isna()]
    assert 0 <= len(req) - len(refused) - len(srv.seen()) <= len(unanswered)
    assert 1 <= len(refused) <= 4 * 8  # 4 lanes, waits 0.05 s doubling over 1.5 s
    assert len(req) - len(refused) == budget  # the budget went to requests that arrived
    assert len(srv.seen()) > first_seen  # and the run went on after the restart
    assert (req.status == "ok").sum() > 0
    # a refused try waits out the endpoint's backoff (0.05 s doubling): that wait is the
    # server's, not the client's lag, which read as client saturation (lags of 52 to
    # 1,556 ms: "Give it more CPU")
    lag_ms = (refused.sent_ns - refused.scheduled_ns) / 1e6
    assert lag_ms.max() < 200, lag_ms.tolist()
    # (the in-flight sign may still fire: requests of a few ms make 1 ms a share of them)
    summary = json.loads((_results(tmp_path) / "summary.json").read_text())
    reasons = (summary["client_saturated"] or {}).get("reasons") or []
    assert not [r for r in reasons if "schedule lag" in r], reasons
    report_reads(_results(tmp_path), tmp_path)


@pytest.mark.timeout(120)
def test_a_server_that_never_answers_a_connection_ends_the_run(tmp_path: Path) -> None:
    """No server at all and no preflight: each request tries for reconnect_s, then fails;
    the run ends, exits 1 and names the error."""
    from tests.helpers import free_port

    sc = scenario(tmp_path, f"http://127.0.0.1:{free_port()}", lanes=2,
                  limits="max_requests: 4",
                  extra_endpoint="preflight: false\n    reconnect_s: 0.5")
    r = run_cli("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r")
    assert r.returncode == 1 and "connect_error" in r.stderr
    req = rows(_results(tmp_path))
    assert (req.error_type == "connect_error").all() and len(req) >= 4
    assert run_json(_results(tmp_path))["status"] == "completed"
