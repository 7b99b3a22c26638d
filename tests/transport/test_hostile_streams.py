"""Events whose JSON parses but is not what a reader expects, or does not parse for a reason
the JSON reader raises as no ValueError (nested past Python's recursion limit): each is the
request's error row, never an exception out of the reader (which ended the whole run: a
traceback, run.json ``crashed``, the rows buffered since the last flush lost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench import load
from agentbench.results.schema import RUN_FILE, RequestRecord
from agentbench.results.writer import ResultsWriter
from agentbench.testing.shapes import DEEP
from agentbench.transport.finish import finish_record
from agentbench.transport.sse import parse_stream, read_count

TOKEN = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
#: usage saying more tokens than events, so each event's text is read to split them
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}}\n\n'
DONE = b"data: [DONE]\n\n"
DELTA = b'data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}\n\n'
STOP = b'data: {"type":"message_stop"}\n\n'

CASES = {
    # chat: only the usage event is decoded, so depth there; shapes in the events whose
    # text is read to split usage's count among them
    "chat usage nested too deep": (
        "chat", [TOKEN, b'data: {"choices":[],"usage":{"prompt_tokens":1},"x":' + DEEP
                 + b"}\n\n", DONE], "malformed_sse"),
    "chat delta a list": ("chat", [TOKEN, b'data: {"choices":[{"delta":[1]}],"content":"x"}'
                                  b"\n\n", USAGE, DONE], None),
    "chat tool_calls strings": (
        "chat", [b'data: {"choices":[{"delta":{"content":"x","tool_calls":["s"]}}]}\n\n',
                 USAGE, DONE], None),
    "chat choices a number": ("chat", [TOKEN, b'data: {"choices":5,"content":"x"}\n\n', USAGE,
                                       DONE], None),
    "chat tool call function a string": (
        "chat", [b'data: {"choices":[{"delta":{"content":"x","tool_calls":[{"function":"f"}]'
                 b"}}]}\n\n", USAGE, DONE], None),
    # typed APIs decode every event
    "responses event nested too deep": (
        "responses", [b'data: {"type":"response.output_text.delta","delta":"x"}\n\n',
                      b'data: {"type":"response.output_text.delta","delta":' + DEEP
                      + b"}\n\n"], "malformed_sse"),
    "messages event nested too deep": ("messages", [DELTA, b"data: " + DEEP + b"\n\n", STOP],
                                       "malformed_sse"),
    "messages delta type a list": (
        "messages", [b'data: {"type":"content_block_delta","delta":{"type":[1],"text":"x"}}'
                     b"\n\n", DELTA, STOP], None),
    "messages delta type an object": (
        "messages", [b'data: {"type":"content_block_delta","delta":{"type":{},"text":"x"}}'
                     b"\n\n", DELTA, STOP], None),
}


def _rec(api: str, chunks: list[bytes], i: int = 0) -> RequestRecord:
    r = RequestRecord(request_id=i, stage="s", phase="measure", endpoint="e", lane=0,
                      tree_id="t#0", session_id="t", relation="root", copy=0, turn=0,
                      scheduled_ns=0, expected_input_tokens=10, expected_output_tokens=5,
                      potential_cached_tokens=0, sent_ns=0, end_ns=9_000_000,
                      http_status=200, api=api)
    r.chunks = chunks
    r.chunk_ns = [1_000_000 * (k + 1) for k in range(len(chunks))]
    return r


@pytest.mark.parametrize("case", list(CASES))
def test_json_no_reader_expected_is_the_requests_row_not_a_crash(case: str) -> None:
    api, chunks, error = CASES[case]
    row = finish_record(_rec(api, chunks))
    assert row["error_type"] == error, row["error_message"]
    assert row["status"] == ("ok" if error is None else "error")
    assert row["token_events"] >= 1
    assert len(row["token_event_tokens"]) == row["token_events"]


def test_every_such_row_is_written_and_read(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    w = ResultsWriter(run)
    for i, (api, chunks, _) in enumerate(CASES.values()):
        w.add_request(finish_record(_rec(api, chunks, i)))
    w.close()
    assert w.failure is None
    (run / RUN_FILE).write_text('{"scenario": {"name": "x"}, "status": "completed"}')
    req = load(run).requests
    assert sorted(req.request_id) == list(range(len(CASES)))
    want = [e for _, _, e in CASES.values()]
    assert [e if isinstance(e, str) else None
            for e in req.sort_values("request_id").error_type] == want


def test_a_stream_its_reader_cannot_read_is_the_requests_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a reader has not foreseen ends as that request's row (the run goes on)."""
    import agentbench.transport.finish as finish

    def broken(api: str, chunks: object, times: object) -> None:
        raise RuntimeError("a shape nobody foresaw")

    monkeypatch.setattr(finish, "read_stream", broken)
    row = finish_record(_rec("chat", [TOKEN, USAGE, DONE]))
    assert (row["status"], row["error_type"]) == ("error", "malformed_sse")
    assert "RuntimeError: a shape nobody foresaw" in row["error_message"]
    assert row["token_events"] == 0


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_an_error_message_with_a_lone_surrogate_is_written_and_read(
        tmp_path: Path, api: str) -> None:
    r"""A JSON error event may say ``"\ud800"``, a lone surrogate that no UTF-8 file holds:
    the journal and the table refused the row (the run crashed at its next flush, losing
    every row buffered with it). It is replaced, the rest of the message kept."""
    from agentbench.testing.shapes import shape

    wire = shape(f"/v1/{api}")
    chunks = [wire.token("x", False, None), wire.error("engine died \ud800 twice")]
    run = tmp_path / "run"
    run.mkdir()
    w = ResultsWriter(run)
    good = finish_record(_rec("chat", [TOKEN, USAGE, DONE], 0))
    bad = finish_record(_rec(api, chunks, 1))
    assert bad["error_type"] == "stream_error"
    assert "engine died ? twice" in bad["error_message"]
    w.add_request(good)
    w.add_request(bad)
    w.close()
    assert w.failure is None
    (run / RUN_FILE).write_text('{"scenario": {"name": "x"}, "status": "completed"}')
    req = load(run).requests.sort_values("request_id")
    assert list(req.status) == ["ok", "error"]


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.one_of(
    st.integers(), st.integers(-2**80, 2**80), st.floats(allow_nan=False), st.just(2**70),
    st.sampled_from(["NaN", "Infinity", "1e400", "-1e400", "1.5", "12.0", "-0"])),
    min_size=3, max_size=3))
def test_usage_counts_are_those_pythons_json_reader_gives(counts: list[object]) -> None:
    """The usage event is read with orjson first, which reads an integer past 64 bits as a
    float (and refuses NaN and 1e400, left to Python's reader): every count is what
    ``read_count`` makes of Python's reading."""
    p, c, k = (v if isinstance(v, str) else json.dumps(v) for v in counts)
    ev = (f'data: {{"choices":[],"usage":{{"prompt_tokens":{p},"completion_tokens":{c},'
          f'"prompt_tokens_details":{{"cached_tokens":{k}}}}}}}\n\n').encode()
    st_ = parse_stream([TOKEN, ev, DONE], [1, 2, 3])
    usage = json.loads(ev[6:])["usage"]
    assert (st_.prompt_tokens, st_.completion_tokens, st_.cached_tokens) == (
        read_count(usage["prompt_tokens"]), read_count(usage["completion_tokens"]),
        read_count(usage["prompt_tokens_details"]["cached_tokens"]))
