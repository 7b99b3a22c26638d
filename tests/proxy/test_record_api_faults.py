"""What a fault-injection review of the Responses and Messages support found, each kept
fixed: a stream that fails after its 200 is no turn; Messages' placeholder output count is
not taken; CR-only streams are read; breakpoints survive a server that counts fewer tokens;
previous_response_id is said; secrets echoed in an error event are redacted; the start-up
probes ask Responses for at least 16 tokens; extra_body cannot set the prompt's fields."""

from __future__ import annotations

import json

import pytest

from agentbench.proxy.calls import CHAINED_NOTE, Analyzer, _marks
from agentbench.proxy.reply import parse_response
from agentbench.results.schema import RequestRecord
from agentbench.scenario.model import Scenario
from agentbench.testing.shapes import MessagesShape, ResponsesShape, Shape
from agentbench.transport.apis import small_body
from agentbench.transport.finish import finish_record
from agentbench.transport.typed_sse import parse_typed

BODY = {"model": "m", "max_tokens": 8, "stream": True,
        "messages": [{"role": "user", "content": "hello there"}]}


def _stream(shape: Shape, n: int, counts: tuple[int, int, int] | None, *,
            error: bool = False) -> bytes:
    out = shape.opening(counts) + b"".join(shape.token("w ", False, counts) for _ in range(n))
    return out + (shape.error() if error else shape.closing(counts, True))


def _call(path: str, body: dict, response: bytes, **kw: object) -> object:
    return Analyzer().call(index=0, path=path, body_bytes=json.dumps(body).encode(),
                           status=200, arrival_ns=0, first_byte_ns=1, end_ns=2,
                           response=response, encoding=None, session_key=None,
                           parent_key=None, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("path", "shape"), [("/v1/messages", MessagesShape("messages")),
                                             ("/v1/responses", ResponsesShape()),
                                             ("/v1/chat/completions", Shape("chat"))])
def test_a_stream_that_fails_after_its_200_is_no_turn(path: str, shape: Shape) -> None:
    body = dict(BODY) if "messages" in path or "chat" in path else {
        "model": "m", "input": "hello there", "stream": True}
    call = _call(path, body, _stream(shape, 3, (10, 0, 3), error=True))
    assert not call.ok and "engine died" in (call.stream_error or "")  # type: ignore[attr-defined]
    good = _call(path, body, _stream(shape, 3, (10, 0, 3)))
    assert good.ok and good.stream_error is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_stream_that_fails_as_vllm_says_it_is_no_turn(api: str) -> None:
    """vLLM writes a mid-stream failure as its ErrorResponse (``{"object": "error",
    "message": ..., "type": "BadRequestError", ...}``), not in an ``error`` object; its
    ``type`` was read as a Responses event type and the failure dropped: the call was a
    turn (``ok``) with the stream's first tokens as its answer."""
    shape = Shape(api)
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    body = dict(BODY) if api == "chat" else {"model": "m", "prompt": "hi", "stream": True}
    raw = shape.opening((10, 0, 3)) + shape.token("w ", False, (10, 0, 3)) \
        + shape.vllm_error("engine died") + b"data: [DONE]\n\n"
    call = _call(path, body, raw)
    assert not call.ok  # type: ignore[attr-defined]
    assert call.stream_error == "BadRequestError: engine died"  # type: ignore[attr-defined]


def test_messages_placeholder_output_count_is_not_taken() -> None:
    """message_start says output_tokens 1; without a count in message_delta the stream's
    own tokens are the count (the run's reader leaves it unknown: tokens from the stream)."""
    raw = _stream(MessagesShape("messages"), 30, None)
    st = parse_typed([raw], [1], "messages")
    assert st.completion_tokens is None and len(st.token_event_ns) == 30
    call = _call("/v1/messages", BODY, raw)  # counted with the approximate tokenizer
    assert abs(call.output_tokens - 30) <= 2  # type: ignore[attr-defined]


def test_cr_only_streams_are_read_by_the_recorder() -> None:
    raw = _stream(MessagesShape("messages"), 4, (100, 60, 4)).replace(b"\n", b"\r")
    reply = parse_response(raw, None, True)
    assert reply.usage == {"prompt_tokens": 100, "completion_tokens": 4,
                           "prompt_tokens_details": {"cached_tokens": 60}}
    chat = _stream(Shape("chat"), 4, (100, 60, 4)).replace(b"\n", b"\r")
    assert parse_response(chat, None, True).usage["prompt_tokens"] == 100  # type: ignore[index]


@pytest.mark.parametrize("shape", [Shape("chat"), Shape("completions"),
                                   MessagesShape("messages"), ResponsesShape()])
def test_a_leading_byte_order_mark_is_dropped_by_the_recorder(shape: Shape) -> None:
    """As the replay's readers drop it (SSE): the reply is the one without the mark. A
    completions stream lost its first event's text (its line began with the mark)."""
    import dataclasses

    from agentbench.transport.sselines import BOM

    raw = _stream(shape, 4, (100, 60, 4))
    with_mark = dataclasses.asdict(parse_response(BOM + raw, None, True))
    assert with_mark == dataclasses.asdict(parse_response(raw, None, True))
    assert with_mark["text_chars"] > 0


@pytest.mark.parametrize("cut", ["split", "gzip"])
@pytest.mark.parametrize("shape", [Shape("chat"), Shape("completions"),
                                   MessagesShape("messages"), ResponsesShape()])
def test_a_byte_order_mark_cut_across_reads_is_dropped_by_the_recorder(shape: Shape,
                                                                       cut: str) -> None:
    """The mark cut between two reads of the relayed body (``\\xef``, then the rest), or a
    gzip body whose first read is the gzip header alone (Python's zlib writes it so: it
    inflates to nothing): the reply is the one without the mark. Before, only a mark whole
    in the first read was dropped, and a completions stream lost its first event's text."""
    import dataclasses
    import zlib

    from agentbench.proxy.reply import ResponseTap
    from agentbench.transport.sselines import BOM

    raw = _stream(shape, 4, (100, 60, 4))
    want = dataclasses.asdict(parse_response(raw, None, True))
    if cut == "split":
        reads, encoding = [BOM[:1], BOM[1:] + raw[:7], raw[7:]], None
    else:
        z = zlib.compressobj(wbits=31)
        reads, encoding = [z.compress(BOM + raw), z.flush()], "gzip"
        assert zlib.decompressobj(47).decompress(reads[0]) == b""
    tap = ResponseTap(encoding)
    for r in reads:
        tap.add(r)
    assert dataclasses.asdict(tap.reply(True)) == want


def test_breakpoints_are_scaled_to_the_servers_count() -> None:
    assert _marks([124, 277, 441], 317, 441) == [89, 199, 317]
    assert _marks([10, 20], 20, 20) == [10, 20] and _marks([], 5, 9) is None


def test_previous_response_id_is_said() -> None:
    body = {"model": "m", "input": "next", "previous_response_id": "resp_1", "stream": True}
    call = _call("/v1/responses", body, _stream(ResponsesShape(), 2, (50, 0, 2)))
    assert CHAINED_NOTE in (call.error or "")  # type: ignore[attr-defined]


def test_a_secret_echoed_in_an_error_event_is_redacted() -> None:
    key = "sk-ant-echoed-5521"
    ev = (b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
          b'"message":"bad key ' + key.encode() + b'"}}\n\n')
    rec = RequestRecord(request_id=0, stage="s", phase="measure", endpoint="e", lane=0,
                        tree_id="t", session_id="t", relation="root", copy=0, turn=0,
                        scheduled_ns=0, expected_input_tokens=1, expected_output_tokens=1,
                        potential_cached_tokens=0, http_status=200, chunks=[ev],
                        chunk_ns=[5], api="messages", secrets=(key,))
    row = finish_record(rec)
    assert row["error_type"] == "stream_error" and key not in row["error_message"]
    assert "<redacted>" in row["error_message"]


def test_responses_probes_ask_for_at_least_16_tokens() -> None:
    assert small_body("responses", "m", {}, "hi", 1)["max_output_tokens"] == 16
    assert small_body("chat", "m", {}, "hi", 1)["max_tokens"] == 1


@pytest.mark.parametrize(("api", "key"), [("responses", "input"),
                                          ("responses", "instructions"),
                                          ("messages", "system")])
def test_extra_body_cannot_set_the_prompts_fields(api: str, key: str) -> None:
    with pytest.raises(ValueError, match=f"extra_body may not set {key} with api: {api}"):
        Scenario.model_validate({
            "name": "x", "endpoints": [{"kind": "openai", "url": "http://h:1", "model": "m",
                                        "api": api, "extra_body": {key: "x"}}],
            "trace": {"kind": "synth", "profile": "codex", "sessions": 1},
            "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 1}})
