"""Responses and Messages streams read into token events, usage and errors
(``agentbench.transport.typed_sse``): the events as the APIs document them, each fault a
server can make of them, and any cut of the bytes into reads."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench.transport.apis import read_stream
from agentbench.transport.typed_sse import parse_typed


def _ev(kind: str, **data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def responses_stream(words: list[str], usage: dict | None = None, *, end: str =
                     "response.completed", reasoning: int = 0, tool: bool = False
                     ) -> list[bytes]:
    """A Responses stream as OpenAI documents it (one event a chunk)."""
    r = {"id": "resp_1", "object": "response", "status": "in_progress", "usage": None}
    out = [_ev("response.created", response=r), _ev("response.in_progress", response=r)]
    out += [_ev("response.reasoning_summary_text.delta", item_id="rs", delta="think")
            for _ in range(reasoning)]
    out.append(_ev("response.output_item.added", output_index=0, item={"type": "message"}))
    out += [_ev("response.output_text.delta", item_id="m", delta=w) for w in words]
    out.append(_ev("response.output_text.delta", item_id="m", delta=""))  # no tokens
    if tool:
        out.append(_ev("response.function_call_arguments.delta", item_id="fc",
                       delta='{"path":'))
    out.append(_ev("response.output_text.done", item_id="m", text="".join(words)))
    if end:
        out.append(_ev(end, response={**r, "status": "completed", "usage": usage}))
    return out


def messages_stream(words: list[str], start_usage: dict | None, delta_usage: dict | None,
                    *, stop: bool = True, thinking: int = 0, tool: bool = False
                    ) -> list[bytes]:
    """A Messages stream as Anthropic documents it (ping included)."""
    out = [_ev("message_start", message={"id": "msg_1", "type": "message", "content": [],
                                         "usage": start_usage}),
           _ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
           _ev("ping")]
    out += [_ev("content_block_delta", index=0,
                delta={"type": "thinking_delta", "thinking": "hm"}) for _ in range(thinking)]
    out += [_ev("content_block_delta", index=0, delta={"type": "signature_delta",
                                                       "signature": "abc"})]
    out += [_ev("content_block_delta", index=0, delta={"type": "text_delta", "text": w})
            for w in words]
    if tool:
        out.append(_ev("content_block_delta", index=1,
                       delta={"type": "input_json_delta", "partial_json": '{"a":'}))
        out.append(_ev("content_block_delta", index=1,
                       delta={"type": "input_json_delta", "partial_json": ""}))
    out.append(_ev("content_block_stop", index=0))
    out.append(_ev("message_delta", delta={"stop_reason": "max_tokens"}, usage=delta_usage))
    if stop:
        out.append(_ev("message_stop"))
    return out


def _times(chunks: list[bytes]) -> list[int]:
    return [1000 * (i + 1) for i in range(len(chunks))]


RESP_USAGE = {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1024},
              "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0}}


def test_a_responses_stream_gives_token_events_and_usage() -> None:
    chunks = responses_stream(["a", "b", "c"], RESP_USAGE)
    st_ = read_stream("responses", chunks, _times(chunks))
    assert st_.error_type is None and st_.done
    # the three text deltas, stamped with their own chunk's arrival (events 4, 5, 6)
    assert st_.token_event_ns == [4000, 5000, 6000]
    assert st_.token_event_tokens == [1, 1, 1]
    assert (st_.prompt_tokens, st_.cached_tokens, st_.completion_tokens) == (1200, 1024, 3)


def test_reasoning_and_tool_call_deltas_are_tokens_too_and_ttft_is_the_first() -> None:
    usage = {**RESP_USAGE, "output_tokens": 9}
    chunks = responses_stream(["a", "b"], usage, reasoning=2, tool=True)
    st_ = parse_typed(chunks, _times(chunks), "responses")
    assert len(st_.token_event_ns) == 5  # 2 reasoning, 2 text, 1 tool-call arguments
    assert st_.token_event_ns[0] == 3000  # the first reasoning delta
    assert sum(st_.token_event_tokens) == 9  # spread by text to match usage


def test_an_incomplete_response_at_the_output_limit_is_a_success() -> None:
    chunks = responses_stream(["a"], {**RESP_USAGE, "output_tokens": 1},
                              end="response.incomplete")
    st_ = parse_typed(chunks, _times(chunks), "responses")
    assert st_.error_type is None and st_.done and st_.completion_tokens == 1


def test_a_responses_stream_cut_before_completed_is_incomplete() -> None:
    chunks = responses_stream(["a", "b"], None, end="")
    st_ = parse_typed(chunks, _times(chunks), "responses")
    assert st_.error_type == "incomplete_stream"
    assert "response.completed" in (st_.error_message or "")
    assert len(st_.token_event_ns) == 2 and st_.prompt_tokens is None


def test_error_and_failed_events_fail_the_request_keeping_the_tokens_before() -> None:
    chunks = responses_stream(["a", "b"], None, end="")
    chunks.append(_ev("error", code="server_error", message="engine died"))
    st_ = parse_typed(chunks, _times(chunks), "responses")
    assert st_.error_type == "stream_error" and "engine died" in (st_.error_message or "")
    assert len(st_.token_event_ns) == 2
    chunks = responses_stream(["a"], None, end="")
    chunks.append(_ev("response.failed", response={"status": "failed", "error": {
        "code": "server_error", "message": "out of memory"}}))
    st_ = parse_typed(chunks, _times(chunks), "responses")
    assert st_.error_type == "stream_error" and "out of memory" in (st_.error_message or "")


def test_malformed_typed_events_are_named() -> None:
    chunks = responses_stream(["a"], RESP_USAGE)
    chunks.insert(3, b"event: response.output_text.delta\ndata: {not json\n\n")
    st_ = parse_typed(chunks, _times(chunks), "responses")
    assert st_.error_type == "malformed_sse" and "not valid JSON" in (st_.error_message or "")
    chunks = messages_stream(["a"], None, None)
    chunks.insert(2, b"garbage line\n\n")
    st_ = parse_typed(chunks, _times(chunks), "messages")
    assert st_.error_type == "malformed_sse" and "not an SSE line" in (st_.error_message or "")
    chunks = messages_stream(["a"], None, None)
    chunks.insert(2, b"data: [1, 2]\n\n")
    st_ = parse_typed(chunks, _times(chunks), "messages")
    assert st_.error_type == "malformed_sse" and "not a JSON object" in (st_.error_message or "")


def test_a_messages_stream_counts_cache_reads_and_writes_into_the_prompt() -> None:
    start = {"input_tokens": 50, "cache_read_input_tokens": 1000,
             "cache_creation_input_tokens": 150, "output_tokens": 1}
    chunks = messages_stream(["x", "y", "z"], start, {"output_tokens": 3})
    st_ = read_stream("messages", chunks, _times(chunks))
    assert st_.error_type is None and st_.done
    assert st_.token_event_ns == [5000, 6000, 7000]  # not ping, not the signature
    assert (st_.prompt_tokens, st_.cached_tokens, st_.completion_tokens) == (1200, 1000, 3)


def test_message_delta_counts_replace_message_start_ones() -> None:
    start = {"input_tokens": 10, "output_tokens": 1}
    final = {"input_tokens": 40, "cache_read_input_tokens": 960, "output_tokens": 4}
    chunks = messages_stream(["x", "y"], start, final, thinking=1, tool=True)
    st_ = parse_typed(chunks, _times(chunks), "messages")
    assert (st_.prompt_tokens, st_.cached_tokens, st_.completion_tokens) == (1000, 960, 4)
    assert len(st_.token_event_ns) == 4  # thinking, two text, one tool input (not the empty)


def test_messages_without_usage_or_stop_and_with_an_error_event() -> None:
    chunks = messages_stream(["x"], None, None)
    st_ = parse_typed(chunks, _times(chunks), "messages")
    assert st_.error_type is None and st_.prompt_tokens is None and st_.cached_tokens is None
    chunks = messages_stream(["x"], None, None, stop=False)
    assert parse_typed(chunks, _times(chunks), "messages").error_type == "incomplete_stream"
    chunks = messages_stream(["x"], None, None, stop=False)
    chunks.append(_ev("error", error={"type": "overloaded_error", "message": "Overloaded"}))
    st_ = parse_typed(chunks, _times(chunks), "messages")
    assert st_.error_type == "stream_error"
    assert st_.error_message == "overloaded_error: Overloaded"


def test_impossible_usage_is_kept_within_bounds_not_raised() -> None:
    huge = {"input_tokens": 2**70, "input_tokens_details": {"cached_tokens": float("nan")},
            "output_tokens": "3"}
    chunks = responses_stream(["a"], huge)
    st_ = parse_typed(chunks, _times(chunks), "responses")
    assert st_.error_type is None
    assert st_.prompt_tokens is not None and st_.prompt_tokens < 2**63
    assert st_.cached_tokens is None and st_.completion_tokens is None
    start = {"input_tokens": 2**70, "cache_read_input_tokens": 2**70, "output_tokens": 1}
    chunks = messages_stream(["a"], start, {"output_tokens": True})
    st_ = parse_typed(chunks, _times(chunks), "messages")
    assert st_.prompt_tokens is not None and st_.prompt_tokens < 2**63
    # a bool is no count, and message_start's 1 is a placeholder: unknown (the stream's
    # own tokens count instead)
    assert st_.completion_tokens is None


def test_crlf_lines_and_multi_line_data_are_read() -> None:
    body = (b"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":"
            b"{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\r\n\r\n"
            b": a comment\r\n\r\n"
            b"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\r\n"
            b"data: \"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\r\n\r\n"
            b"event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n")
    st_ = parse_typed([body], [7], "messages")
    assert st_.error_type is None and st_.done and st_.token_event_ns == [7]
    assert st_.prompt_tokens == 5


@st.composite
def _cuts(draw: st.DrawFn) -> tuple[str, list[bytes]]:
    api = draw(st.sampled_from(["responses", "messages"]))
    words = draw(st.lists(st.sampled_from(["a", "bc", " d", "é"]), min_size=0, max_size=6))
    chunks = responses_stream(words, RESP_USAGE) if api == "responses" else \
        messages_stream(words, {"input_tokens": 9, "output_tokens": 1},
                        {"output_tokens": len(words)})
    body = b"".join(chunks)
    cuts = sorted(draw(st.sets(st.integers(1, len(body) - 1), max_size=12)))
    return api, [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


@settings(max_examples=150, deadline=None)
@given(_cuts())
def test_any_cut_of_the_bytes_gives_the_same_reading(case: tuple[str, list[bytes]]) -> None:
    api, pieces = case
    whole = parse_typed([b"".join(pieces)], [1], api)
    cut = parse_typed(pieces, list(range(1, len(pieces) + 1)), api)
    assert (cut.error_type, cut.done, cut.prompt_tokens, cut.cached_tokens,
            cut.completion_tokens, cut.token_event_tokens) == (
        whole.error_type, whole.done, whole.prompt_tokens, whole.cached_tokens,
        whole.completion_tokens, whole.token_event_tokens)
    assert whole.error_type is None
    # each token event is stamped no earlier than the read that began it
    assert cut.token_event_ns == sorted(cut.token_event_ns)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["responses", "messages"]),
       st.lists(st.binary(max_size=64), min_size=1, max_size=6))
def test_any_bytes_are_a_reading_or_a_named_error_never_an_exception(
        api: str, chunks: list[bytes]) -> None:
    st_ = parse_typed(chunks, list(range(len(chunks))), api)
    assert st_.done or st_.error_type in ("incomplete_stream", "malformed_sse",
                                          "stream_error")
    assert len(st_.token_event_ns) == len(st_.token_event_tokens)
