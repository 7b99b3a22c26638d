"""A chat or completions stream that fails mid-way with an error event: OpenAI's shape
(``data: {"error": {...}}``) and vLLM's, whose ErrorResponse is the event's data
(``data: {"object":"error","message":...}``, then the body ends; some versions send
``data: [DONE]`` after it). Either is the request's ``stream_error`` row with the server's
message, the token events before it kept, however the reads cut the stream."""

from __future__ import annotations

import json
import re

import pytest

from agentbench.replay.overflow import classifier
from agentbench.results.schema import RequestRecord
from agentbench.testing.shapes import shape
from agentbench.transport import apis
from agentbench.transport.finish import finish_record

KEY = "sk-proj-0123456789abcdefghijABCDEFGHIJxyz"
COUNTS = (10, 0, 5)


def vllm_error(message: str, spaced: bool = False) -> bytes:
    """vLLM's ErrorResponse as an event: compact (pydantic) or ``json.dumps``'s spacing."""
    err = {"object": "error", "message": message, "type": "BadRequestError", "param": None,
           "code": 400}
    text = json.dumps(err) if spaced else json.dumps(err, separators=(",", ":"))
    return b"data: " + text.encode() + b"\n\n"


def openai_error(message: str) -> bytes:
    return b"data: " + json.dumps({"error": {"message": message}}).encode() + b"\n\n"


def stream(api: str, error: bytes, done_after: bool) -> list[bytes]:
    """Two token events, then ``error``; ``data: [DONE]`` after it when ``done_after``."""
    w = shape(apis.path(api))
    evs = [w.opening(COUNTS)] if w.opening(COUNTS) else []
    evs += [w.token("w1 ", False, COUNTS), w.token("w2 ", False, COUNTS), error]
    return evs + [b"data: [DONE]\n\n"] if done_after else evs


def reads(chunks: list[bytes], cut: str) -> list[bytes]:
    """The stream as the client read it: one event a read, all at once, or 100-byte reads."""
    if cut == "per-event":
        return chunks
    body = b"".join(chunks)
    return [body] if cut == "one-read" else [body[i:i + 100] for i in range(0, len(body), 100)]


def _record(api: str, chunks: list[bytes], secrets: tuple[str, ...] = ()) -> RequestRecord:
    r = RequestRecord(request_id=0, stage="s", phase="measure", endpoint="e", lane=0,
                      tree_id="t#0", session_id="t", relation="root", copy=0, turn=0,
                      scheduled_ns=0, expected_input_tokens=10, expected_output_tokens=5,
                      potential_cached_tokens=0, sent_ns=0, end_ns=9_000_000,
                      http_status=200, api=api, secrets=secrets)
    r.chunks = chunks
    r.chunk_ns = [1_000_000 * (k + 1) for k in range(len(chunks))]
    return r


@pytest.mark.parametrize("done_after", [False, True])
@pytest.mark.parametrize("cut", ["per-event", "one-read", "100-byte reads"])
@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_vllms_error_event_is_a_stream_error_with_its_message(
        api: str, spaced: bool, cut: str, done_after: bool) -> None:
    """It was read as an event without tokens: ``incomplete_stream`` when the body ended
    after it (the message lost), an ok row when ``[DONE]`` followed."""
    chunks = reads(stream(api, vllm_error("boom: out of KV cache", spaced), done_after), cut)
    st = apis.read_stream(api, chunks, list(range(1, len(chunks) + 1)))
    assert st.error_type == "stream_error", (st.error_type, st.error_message)
    assert "boom: out of KV cache" in (st.error_message or "")
    assert len(st.token_event_ns) == 2 and len(st.token_event_tokens) == 2
    # as OpenAI's error event at the same place reads, but for the message's own text
    same = reads(stream(api, openai_error("boom: out of KV cache"), done_after), cut)
    ref = apis.read_stream(api, same, list(range(1, len(same) + 1)))
    assert (ref.error_type, ref.token_event_ns, ref.token_event_tokens, ref.done) == \
        (st.error_type, st.token_event_ns, st.token_event_tokens, st.done)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_vllms_error_event_makes_the_row_an_error_redacted_as_any_other(api: str) -> None:
    row = finish_record(_record(api, stream(api, vllm_error(f"bad key {KEY}"), False),
                                secrets=(KEY,)))
    assert (row["status"], row["error_type"]) == ("error", "stream_error")
    assert KEY not in row["error_message"] and "bad key <redacted>" in row["error_message"]
    assert row["token_events"] == 2


def test_a_vllm_context_overflow_mid_stream_is_classified_as_overflow() -> None:
    """The message kept, the replay's overflow rule reads it as for any failed request."""
    msg = "This model's maximum context length is 4096 tokens. However, you requested 5000"
    rows = [finish_record(_record("chat", stream("chat", err, False)))
            for err in (vllm_error(msg), openai_error(msg))]
    amend = classifier(None)
    assert amend is not None
    for row in rows:
        amend(row)
    assert [r["error_type"] for r in rows] == ["context_overflow"] * 2


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_what_only_looks_like_vllms_error_is_no_error(api: str) -> None:
    """A token whose text is vLLM's error, or an ``"object": "error"`` that is not the
    event's own first key, ends nothing."""
    w = shape(apis.path(api))
    chunks = [w.token('{"object":"error","message":"x"}', False, COUNTS),
              b'data: {"id":"x","choices":[],"x":{"object":"error","message":"y"}}\n\n',
              w.token("w2 ", True, COUNTS), w.closing(COUNTS, True)]
    for cut in ("per-event", "one-read"):
        got = reads([c for c in chunks if c], cut)
        st = apis.read_stream(api, got, list(range(1, len(got) + 1)))
        assert st.error_type is None and st.done, (cut, st.error_message)
        assert len(st.token_event_ns) == 2


@pytest.mark.parametrize("cut", ["stall_timeout", "timeout", "disconnected"])
def test_an_error_event_then_a_cut_is_the_servers_error(cut: str) -> None:
    """An error event the stream's timer did not end the request at (its bytes not the
    ones it looks for: ``{ "error"``), then the transport cut the stream: the row is the
    server's ``stream_error`` with its message (redacted), the cut said after it. It was
    the cut alone, the server's message lost."""
    chunks = stream("chat", b'data: { "error": {"message": "engine died ' + KEY.encode()
                    + b'"}}\n\n', False)
    rec = _record("chat", chunks, secrets=(KEY,))
    rec.status, rec.error_type, rec.error_message = "error", cut, "no data for 2 s"
    row = finish_record(rec)
    assert row["status"] == "error" and row["error_type"] == "stream_error"
    assert row["error_message"].startswith('{ "error": {"message": "engine died <redacted>')
    assert row["error_message"].endswith(f"(then {cut}: no data for 2 s)")
    assert row["token_events"] == 2 and KEY not in row["error_message"]
    rec = _record("chat", stream("chat", b"", False))  # no error event: the cut alone
    rec.status, rec.error_type, rec.error_message = "error", cut, "no data for 2 s"
    assert finish_record(rec)["error_type"] == cut


#: secrets as JSON spells them: a quote and a backslash escaped, non-ASCII as \u00e4,
#: "/" as "\/" (PHP, Java), "<", ">" and "&" as \u003c, \u003e and \u0026 (Go)
ODD_KEYS = ('pa"ss\\word-1234', "pässwörd-1234", "sk-abc/def+ghi==", "tok<en>&1234")


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("key", ODD_KEYS)
def test_a_key_an_error_event_spells_as_json_is_redacted(api: str, key: str) -> None:
    """A chat or completions error event is kept as the JSON the server sent, where a key
    holding a quote, a backslash, a slash, ``<>&`` or non-ASCII is escaped: it was kept
    whole, as the redaction looked for the key as it is. Whatever the server's JSON
    escapes, and in a row ended by the transport's cut too."""
    spelled = json.dumps(key)[1:-1]
    for form in (spelled, json.dumps(key, ensure_ascii=False)[1:-1],
                 spelled.replace("/", "\\/").replace("<", "\\u003c").replace(">", "\\u003e")
                 .replace("&", "\\u0026"),
                 re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m[1].upper(), spelled)):
        event = b'data: {"error": {"message": "bad key ' + form.encode() + b'"}}\n\n'
        for cut in (None, "disconnected"):
            rec = _record(api, stream(api, event, False), secrets=(key,))
            if cut:
                rec.status, rec.error_type, rec.error_message = "error", cut, "closed"
            row = finish_record(rec)
            assert row["error_type"] == "stream_error"
            assert "bad key <redacted>" in row["error_message"], (form, row["error_message"])
