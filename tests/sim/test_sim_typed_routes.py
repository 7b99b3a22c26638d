"""The simulator's Responses and Messages routes over real HTTP: each API's own events and
usage, read back by the replay's own stream reader, the same prompt and cached tokens as
chat for the same text, and errors in each API's shape."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest

from agentbench.transport.apis import read_stream
from tests.sim.test_sim_server import sim, text_of

pytestmark = pytest.mark.timeout(60)


async def _stream(s: aiohttp.ClientSession, path: str, body: dict) -> tuple[list[bytes],
                                                                             list[int]]:
    chunks, times = [], []
    async with s.post(path, json=body) as r:
        assert r.status == 200 and r.content_type == "text/event-stream"
        async for piece in r.content.iter_any():
            chunks.append(piece)
            times.append(time.perf_counter_ns())
    return chunks, times


def _kinds(chunks: list[bytes]) -> list[str]:
    lines = b"".join(chunks).decode().splitlines()
    return [ln[7:] for ln in lines if ln.startswith("event: ")]


async def test_responses_stream_events_and_usage_match_chat() -> None:
    async with sim(preset="instant") as (_, s):
        content = text_of(8) + " a tail."
        body = {"model": "sim", "instructions": "be brief",
                "input": [{"role": "user", "content": [{"type": "input_text",
                                                        "text": content}]}],
                "max_output_tokens": 5, "ignore_eos": True, "stream": True}
        chunks, times = await _stream(s, "/v1/responses", body)
        kinds = _kinds(chunks)
        assert kinds[:4] == ["response.created", "response.in_progress",
                             "response.output_item.added", "response.content_part.added"]
        assert kinds.count("response.output_text.delta") == 5
        assert kinds[-1] == "response.completed"
        events = [json.loads(ln[6:]) for ln in b"".join(chunks).decode().splitlines()
                  if ln.startswith("data: ")]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        final = events[-1]["response"]
        assert final["status"] == "incomplete"  # stopped by max_output_tokens
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}
        got = read_stream("responses", chunks, times)
        assert got.error_type is None and len(got.token_event_ns) == 5
        # the same text as chat: same prompt tokens; sent again, it is cached
        chat = {"model": "sim", "messages": [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": content}],
                "max_tokens": 5, "ignore_eos": True}
        async with s.post("/v1/chat/completions", json=chat) as r:
            usage = (await r.json())["usage"]
        assert got.prompt_tokens == usage["prompt_tokens"]
        assert usage["prompt_tokens_details"]["cached_tokens"] >= 8 * 64
        assert got.completion_tokens == 5


async def test_messages_stream_events_and_cache_read_accounting() -> None:
    async with sim(preset="instant") as (_, s):
        content = text_of(6)
        body = {"model": "sim", "system": [{"type": "text", "text": "be brief"}],
                "messages": [{"role": "user", "content": content}], "max_tokens": 4,
                "ignore_eos": True, "stream": True}
        first = read_stream("messages", *await _stream(s, "/v1/messages", body))
        chunks, times = await _stream(s, "/v1/messages", body)
        kinds = _kinds(chunks)
        assert kinds[:2] == ["message_start", "content_block_start"]
        assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        again = read_stream("messages", chunks, times)
        assert again.error_type is None and len(again.token_event_ns) == 4
        assert again.prompt_tokens == first.prompt_tokens
        assert first.cached_tokens == 0 and again.cached_tokens == 6 * 64
        start = json.loads(b"".join(chunks).decode().split("data: ", 1)[1].split("\n")[0])
        u = start["message"]["usage"]  # Anthropic's split: input_tokens without cache reads
        assert u["input_tokens"] + u["cache_read_input_tokens"] == again.prompt_tokens


async def test_not_streamed_answers_and_errors_in_each_apis_shape() -> None:
    async with sim(preset="instant") as (_, s):
        async with s.post("/v1/responses", json={"model": "sim", "input": "hello there",
                                                 "max_output_tokens": 3,
                                                 "ignore_eos": True}) as r:
            doc = await r.json()
        assert r.status == 200 and doc["object"] == "response"
        assert doc["usage"]["output_tokens"] == 3 and doc["output"][0]["content"][0]["text"]
        async with s.post("/v1/messages", json={
                "model": "sim", "max_tokens": 2, "ignore_eos": True,
                "messages": [{"role": "user", "content": "hello"}]}) as r:
            doc = await r.json()
        assert r.status == 200 and doc["type"] == "message" and doc["usage"]["output_tokens"] == 2
        async with s.post("/v1/messages", json={
                "model": "sim", "messages": [{"role": "user", "content": "hi"}]}) as r:
            err = await r.json()
        assert r.status == 400 and err["type"] == "error"
        assert "max_tokens" in err["error"]["message"]
        async with s.post("/v1/messages", json={"model": "nope", "max_tokens": 1,
                                                "messages": [{"role": "user",
                                                              "content": "x"}]}) as r:
            assert r.status == 404 and (await r.json())["error"]["type"] == "not_found_error"
        async with s.post("/v1/responses", json={
                "model": "sim", "input": [{"type": "image_generation_call", "id": "x"}]}
                          ) as r:
            assert r.status == 400 and "not supported" in (await r.json())["message"]
