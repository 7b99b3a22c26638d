"""The recorder against odd request bodies and broken relays: text no parquet column
takes (lone surrogates) is escaped, not the end of the recording."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentbench.proxy import RecordConfig, rebuild, start_proxy
from agentbench.proxy.reply import SPILL_BYTES
from agentbench.proxy.store import journal_path, read_meta
from agentbench.traces.readers import native
from tests.helpers import served

pytestmark = pytest.mark.timeout(60)

EVENT = b'data: {"choices":[{"delta":{"content":"tok "}}]}\n\n'


class Upstream:
    """Answers chat calls (model ``die``: three events of a stream, then the connection
    is dropped); keeps each request's body and Content-Encoding as it arrived. Answers
    completions calls with ``replies[model]`` as an event stream."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, str | None]] = []
        self.replies: dict[str, bytes] = {}
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self.app.router.add_post("/v1/completions", self.completions)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(self.replies[(await request.json())["model"]])
        await resp.write_eof()
        return resp

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((await request.read(), request.headers.get("Content-Encoding")))
        body = await request.json()
        if body.get("model") == "die":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(EVENT * 3)
            assert request.transport is not None
            request.transport.close()
            return resp
        return web.json_response({"choices": [{"message": {"content": "one two"}}],
                                  "usage": {"prompt_tokens": 7, "completion_tokens": 2}})


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    up = Upstream()
    async with served(up.app) as url:
        yield up, url


async def _post(url: str, data: bytes, headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as http, http.post(
            url + "/v1/chat/completions", data=data, headers=headers) as r:
        await r.read()
        return r.status


def _chat(content: str, **extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


async def test_lone_surrogates_in_a_call_are_escaped_not_the_end_of_the_trace(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    _, url = upstream
    out = tmp_path / "rec.parquet"
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0, keep_text=True))
    try:  # valid JSON, no valid UTF-8: "user" (the session key) and the model
        for user in ("\udc00a", "\udc01a", "plain"):
            body = json.dumps(_chat(f"hi {user!r}", user=user, model="\ud800m")).encode()
            assert await _post(proxy.url, body) == 200
    finally:
        await proxy.close()  # raised UnicodeEncodeError: no trace written at all
    sessions = native.read(out).sessions
    assert len(sessions) == 3 and read_meta(out)["calls_in_trace"] == 3
    assert [s.model for s in sessions] == ["\\ud800m"] * 3
    # a journal an older recorder wrote with the surrogates as they came: --rebuild
    lines = journal_path(out).read_text().splitlines()
    lines[1] = lines[1].replace("\\\\ud800m", "\\ud800m").replace("\\\\udc00a", "\\udc00a")
    assert "\\ud800m" in lines[1]
    journal_path(out).write_text("\n".join(lines) + "\n")
    rebuild(out)
    assert read_meta(out)["calls_in_trace"] == 3


async def test_a_gzip_request_body_reaches_the_upstream_readable_and_is_recorded(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    up, url = upstream
    out = tmp_path / "rec.parquet"
    body = json.dumps(_chat("a prompt sent compressed " * 20)).encode()
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
    try:  # the proxy's server decodes the body: it went on still labelled gzip (a 500)
        assert await _post(proxy.url, gzip.compress(body),
                           {"Content-Encoding": "gzip"}) == 200
    finally:
        await proxy.close()
    assert up.seen == [(body, None)]
    assert read_meta(out)["calls_in_trace"] == 1


async def test_an_upstream_that_breaks_mid_stream_breaks_the_clients_answer_too(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    _, url = upstream
    out = tmp_path / "rec.parquet"
    body = json.dumps(_chat("hi", model="die", stream=True)).encode()
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
    try:  # as straight from the upstream: the client cannot take a cut stream as whole
        for base in (url, proxy.url):
            async with aiohttp.ClientSession() as http, http.post(
                    base + "/v1/chat/completions", data=body) as r:
                with pytest.raises(aiohttp.ClientPayloadError):
                    await r.read()
        assert await _post(proxy.url, json.dumps(_chat("again")).encode()) == 200
    finally:
        await proxy.close()
    assert read_meta(out)["calls"] == 2


async def test_a_call_whose_body_the_recorder_cannot_read_is_still_journaled_once(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    _, url = upstream
    out = tmp_path / "rec.parquet"
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
    try:  # each raised in the analysis: the call was left out of the journal unsaid
        async with aiohttp.ClientSession() as http:
            for path, data in (("/v1/chat/completions", deep),
                               ("/v1/messages", b'{"model": "m", "messages": 5}')):
                async with http.post(proxy.url + path, data=data) as r:
                    assert r.status in (404, 500)
    finally:
        await proxy.close()
    meta = read_meta(out)
    assert meta["calls"] == 2 and meta["calls_left_out"] == {"http_error": 2}


async def test_a_reply_nested_past_the_json_reader_is_relayed_whole_and_journaled(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    up, url = upstream
    deep = b"[" * 100_000 + b"]" * 100_000
    # past SPILL_BYTES a stream is read as it is relayed: the deep line comes mid-relay
    stream = EVENT * (5 * SPILL_BYTES // len(EVENT) // 4) + b"data: " + deep + b"\n\n"
    replies = up.replies = {"whole": deep, "small": EVENT + b"data: " + deep + b"\n\n" + EVENT,
                            "long": stream + EVENT + b"data: [DONE]\n\n"}
    out = tmp_path / "rec.parquet"
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
    try:  # the long stream's relay raised RecursionError: the client's answer broken off
        async with aiohttp.ClientSession() as http:
            for model, data in replies.items():
                body = {"model": model, "prompt": "hi", "stream": model != "whole"}
                async with http.post(proxy.url + "/v1/completions", json=body) as r:
                    assert r.status == 200 and await r.read() == data
    finally:
        await proxy.close()
    meta = read_meta(out)  # and no call was journaled: "call 0 not recorded"
    assert meta["calls"] == 3 and meta["calls_in_trace"] == 3


async def _chat_then_completion(upstream: tuple[Upstream, str], tmp_path: Path,
                                chat: object, completion: object) -> list[dict[str, Any]]:
    """A chat call whose JSON body says ``"stream": chat`` (the upstream answers it with
    one JSON body) and a completions call saying ``"stream": completion`` (answered with
    a stream) through the recorder: its rows, in call order."""
    import pyarrow.parquet as pq

    up, url = upstream
    up.replies["m"] = (b'data: {"choices":[{"text":"tok "}]}\n\n'
                       b'data: {"choices":[],"usage":{"prompt_tokens":5,'
                       b'"completion_tokens":1}}\n\ndata: [DONE]\n\n')
    out = tmp_path / "rec.parquet"
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
    try:
        assert await _post(proxy.url, json.dumps(_chat("hi", stream=chat)).encode()) == 200
        async with aiohttp.ClientSession() as http, http.post(
                proxy.url + "/v1/completions",
                json={"model": "m", "prompt": "other", "stream": completion}) as r:
            assert r.status == 200 and b"[DONE]" in await r.read()
    finally:
        await proxy.close()
    return sorted(pq.read_table(out).to_pylist(), key=lambda r: r["call_index"])


@pytest.mark.parametrize("flag", ["yes", "false", 1])
async def test_a_stream_flag_that_is_no_boolean_is_read_as_the_upstream_answered(
        upstream: tuple[Upstream, str], tmp_path: Path, flag: object) -> None:
    """``"stream": "yes"`` (or ``"false"``, or ``1``) is no stream in the OpenAI API,
    whose flag is a boolean: servers refuse it, or read it as false (llama.cpp: its
    default) or as true (a lax one). The recorder took any truthy value for a stream and
    read a JSON answer as SSE: its usage lost (counted with the tokenizer, 0 output
    tokens), the call stored as streamed. It now reads what the upstream sent: a JSON
    body here, a stream from an upstream that streamed; only ``true`` asks for one."""
    rows = await _chat_then_completion(upstream, tmp_path, flag, flag)
    assert [r["path"] for r in rows] == ["/v1/chat/completions", "/v1/completions"]
    assert [r["stream"] for r in rows] == [False, True]
    assert [r["usage_reported"] for r in rows] == [True, True]
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(7, 2), (5, 1)]


async def test_an_answer_is_read_as_the_upstream_sent_it_whatever_the_flag_asked(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    """``"stream": true`` answered with one JSON body (a server or gateway that does not
    stream), or ``false`` answered with a stream, was read as the flag asked: nothing read,
    the usage lost (0 output tokens, counted with the tokenizer). A response past
    ``SPILL_BYTES`` was already read as it came; every one now is. The ``stream`` column
    stays the request's flag."""
    rows = await _chat_then_completion(upstream, tmp_path, True, False)
    assert [r["stream"] for r in rows] == [True, False]
    assert [r["usage_reported"] for r in rows] == [True, True]
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(7, 2), (5, 1)]
