"""Server trouble in the Responses and Messages APIs, as a user meets it (agentbench run in
its own process against the fault server speaking that API): each fault of a typed stream
(a malformed event, an ``error`` event mid-stream, no final event, a reset, a stall, usage
missing, impossible or past any sane size) is one row with its error, an endless typed
stream is cut at its cap, and the run reads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import fault_run, report_reads, six_requests
from tests.faults.test_faults_server import EXPECTED as CHAT

#: the row each fault becomes in a typed stream (status, error_type): as in a chat stream,
#: for the faults both streams have, and two more
EXPECTED = {**{f: CHAT[f] for f in ("ok", "http500", "reset", "stall", "malformed",
                                    "error_event", "no_done", "no_usage", "bad_usage")},
            "huge_usage": ("ok", None),
            "endless_stream": ("error", "response_too_large")}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_every_typed_stream_fault_is_one_row_and_the_run_reads(
        tmp_path: Path, fault_server: Any, api: str) -> None:
    faults = list(EXPECTED)
    run, req, srv = fault_run(tmp_path, fault_server, ",".join(faults), api, lanes=3,
                              requests=len(faults))
    seen = srv.seen()
    got = Counter((s, e if isinstance(e, str) else None)
                  for s, e in zip(req.status, req.error_type, strict=True))
    assert got == Counter(EXPECTED[f] for _, f, _ in seen)
    msgs = dict(zip(req.error_type, req.error_message, strict=False))
    assert "engine died" in msgs["stream_error"]
    assert ("response.completed" if api == "responses" else "message_stop") \
        in msgs["incomplete_stream"]
    ok = req[req.status == "ok"]
    assert (ok.token_events > 0).all()
    # usage read from where the API puts it: the good rows carry the prompt's tokens
    good = ok[ok.prompt_tokens.notna() & (ok.prompt_tokens < 1e6)]
    assert len(good) >= 1 and (good.prompt_tokens == good.expected_input_tokens).all()
    summary = json.loads((run / "summary.json").read_text())
    # cached > prompt (bad_usage) and 2**70 (huge_usage) are counted as impossible
    assert summary["overall"]["requests"]["usage_invalid"] == 2
    report_reads(run, tmp_path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_an_event_nested_past_any_json_readers_depth_is_one_row(
        tmp_path: Path, fault_server: Any, api: str) -> None:
    """An event whose JSON nests 100,000 deep (Python's reader raises RecursionError, no
    ValueError): that request's ``malformed_sse`` row; the run goes on, exits 0 and reads
    (it ended the run with a traceback, run.json ``crashed``, and rows lost)."""
    run, req = six_requests(tmp_path, fault_server, "ok,deep_json", api)
    got = Counter((s, e if isinstance(e, str) else None)
                  for s, e in zip(req.status, req.error_type, strict=True))
    assert got == Counter({("ok", None): 3, ("error", "malformed_sse"): 3})
    report_reads(run, tmp_path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_an_error_event_with_a_lone_surrogate_is_one_row(
        tmp_path: Path, fault_server: Any, api: str) -> None:
    r"""An ``error`` event whose message is ``"\ud800"`` (valid JSON, no valid UTF-8): one
    ``stream_error`` row, the run exits 0 (it crashed writing the rows: a traceback,
    run.json ``crashed``, rows lost)."""
    run, req = six_requests(tmp_path, fault_server, "ok,surrogate_error", api)
    assert (req.error_type == "stream_error").sum() == 3
    assert req.error_message.dropna().str.contains("engine died ?", regex=False).all()
    report_reads(run, tmp_path)


