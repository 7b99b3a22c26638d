"""A server whose body goes on after the stream's last event, as a user meets it
(agentbench run in its own process against the fault server, each API): it keeps the
connection open after the event, pings after it, or sends token events after it. Each is
an ok row ended at that event, whose late events are not counted, the run not held by
it; a token whose text holds the event's bytes ends nothing (docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentbench.testing.fakeserver import END_IN_TEXT_PAUSE_S
from agentbench.transport import apis
from tests.faults.harness import report_reads, rows, run_cli, scenario

FAULTS = ["hang_after_end", "ping_after_end", "tokens_after_end", "end_in_text", "ok"]
#: the run's stall timeout: longer than ``end_in_text``'s pause (which must not end it)
STALL_S = 3.0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("api", apis.APIS)
def test_a_body_that_goes_on_after_the_last_event_is_an_ok_row_ended_there(
        tmp_path: Path, fault_server: Any, api: str) -> None:
    srv = fault_server(",".join(FAULTS))
    sc = scenario(tmp_path, srv.url, lanes=1, extra_endpoint=f"api: {api}",
                  limits=f"max_requests: {len(FAULTS)}", stall_s=STALL_S)
    r = run_cli("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r",
                "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    run = tmp_path / "out" / "r"
    req = rows(run).sort_values("sent_ns")  # one lane: in the order the server saw them
    assert [f for _, f, _ in srv.seen()] == FAULTS
    by = dict(zip(FAULTS, req.itertuples(), strict=True))
    for fault, row in by.items():
        assert row.status == "ok" and not isinstance(row.error_type, str), \
            (fault, row.error_type, row.error_message)
        # one token event a token; end_in_text's own token is one more
        assert row.token_events == row.completion_tokens + (fault == "end_in_text"), fault
    for fault in ("hang_after_end", "ping_after_end"):
        row = by[fault]
        # ended at the last event's read, just after the last token, within the grace
        # and a look after it; not at the stall timeout (hang) or the request's (pings)
        assert 0 <= row.end_ns - row.last_token_ns < 200_000_000, fault
        assert (row.end_ns - row.sent_ns) / 1e9 < STALL_S, fault
    late = by["tokens_after_end"]
    assert late.end_ns - late.last_token_ns < 200_000_000
    # not cut at the token that holds the last event's bytes: its last token is one the
    # server wrote after its pause. Measured from the send, which comes before the pause
    # began (the first token's read stamp can come tens of microseconds after the server's
    # write under load, which made a first-to-last gap read 0.99998 s for a 1 s pause)
    text = by["end_in_text"]
    assert (text.last_token_ns - text.sent_ns) / 1e9 >= END_IN_TEXT_PAUSE_S
    report_reads(run, tmp_path)
