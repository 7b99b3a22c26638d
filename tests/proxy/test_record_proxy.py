"""The recording proxy as a pass-through, against a tiny aiohttp upstream: bodies relayed
byte for byte (compressed ones too) and chunk by chunk, headers and query strings
forwarded, other paths passed through, HTTP errors relayed and left out of the trace,
counts taken from the text when the server sends no usage, ``--keep-text``."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow.parquet as pq
import pytest
from aiohttp import web

from agentbench.proxy import RecordConfig, start_proxy
from agentbench.proxy.proxy import parse_listen
from agentbench.proxy.store import journal_path, read_meta
from agentbench.proxy.upstream import upstream_root
from agentbench.traces.readers import native
from agentbench.traces.words import chat_prompt_tokens
from tests.helpers import serve_app

pytestmark = pytest.mark.timeout(60)

WORDS = [" alpha", " beta", " gamma", " delta"]


class Upstream:
    """Streams WORDS one event at a time, each after the client's go-ahead event; answers
    non-streaming calls gzip-compressed; no usage anywhere."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.go = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self.app.router.add_get("/v1/models", self.models)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        body = await request.json()
        if body.get("model") == "missing":
            return web.json_response({"error": {"message": "no such model"}}, status=404)
        if not body.get("stream"):
            doc = {"choices": [{"message": {"role": "assistant", "content": "".join(WORDS)}}]}
            return web.Response(body=gzip.compress(json.dumps(doc).encode()),
                                headers={"Content-Encoding": "gzip",
                                         "Content-Type": "application/json"})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for w in WORDS:
            await resp.write(f'data: {{"choices":[{{"delta":{{"content":"{w}"}}}}]}}\n\n'
                             .encode())
            await self.go.wait()  # the next chunk only once the client saw this one
            self.go.clear()
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}], "query": request.query_string})


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[Upstream, str, Any, Path]]:
    up = Upstream()
    runner, url = await serve_app(up.app)
    out = tmp_path / "rec.parquet"
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0, keep_text=True))
    try:
        yield up, url, proxy, out
    finally:
        await proxy.close()
        await runner.cleanup()


MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say four words."}]


async def test_relay_is_untouched_and_chunked(setup: tuple[Upstream, str, Any, Path]) -> None:
    up, url, proxy, out = setup
    headers = {"Authorization": "Bearer sk-secret-999", "X-Custom": "kept"}
    async with aiohttp.ClientSession(auto_decompress=False) as http:
        # streaming: every chunk reaches the client before the upstream sends the next
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        async with http.post(proxy.url + "/v1/chat/completions", json=body,
                             headers=headers) as r:
            got = []
            for _ in WORDS:
                got.append(await asyncio.wait_for(r.content.readuntil(b"\n\n"), 10))
                up.go.set()
            rest = await r.read()
        assert b"".join(got).count(b"data:") == len(WORDS) and rest == b"data: [DONE]\n\n"
        assert up.seen[-1]["Authorization"] == "Bearer sk-secret-999"
        assert up.seen[-1]["X-Custom"] == "kept"
        # non-streaming, gzip: the same bytes as straight from the upstream
        body = {"model": "m", "messages": MESSAGES, "user": "alice"}
        async with http.post(url + "/v1/chat/completions", json=body) as r:
            direct = await r.read()
        async with http.post(proxy.url + "/v1/chat/completions", json=body) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            assert await r.read() == direct
        # an error is relayed as it is and left out of the trace
        async with http.post(proxy.url + "/v1/chat/completions",
                             json={"model": "missing", "messages": MESSAGES}) as r:
            assert r.status == 404 and (await r.json())["error"]["message"] == "no such model"
        # other paths pass through, query string included
        async with http.get(proxy.url + "/v1/models?limit=5") as r:
            assert (await r.json())["query"] == "limit=5"
    await proxy.recorder.settle()
    assert len(proxy.recorder.calls) == 3  # the models call is not an LLM call
    await proxy.close()
    trace = native.read(out)
    assert [s.session_id for s in trace.sessions] == ["session-0000", "alice"]
    prompt = chat_prompt_tokens(m["content"] for m in MESSAGES)
    for s in trace.sessions:  # no usage: counted with the tokenizer
        assert [(t.input_tokens, t.output_tokens, t.cached_tokens) for t in s.turns] == [
            (prompt, len(WORDS), None)]
    meta = read_meta(out)
    assert meta["calls"] == 3 and meta["calls_left_out"] == {"http_error": 1}
    assert meta["keep_text"] is True
    tab = pq.read_table(out)
    assert tab.column("usage_reported").to_pylist() == [False, False]
    assert json.loads(tab.column("request_text")[0].as_py())["messages"] == MESSAGES
    assert tab.column("response_text").to_pylist() == ["".join(WORDS)] * 2
    for f in (out, journal_path(out)):
        assert b"sk-secret-999" not in f.read_bytes()


async def test_upstream_down_is_a_502(tmp_path: Path) -> None:
    runner, url = await serve_app(web.Application())
    await runner.cleanup()  # nothing listens there now
    proxy = await start_proxy(RecordConfig(upstream=url, out=tmp_path / "r.parquet", port=0))
    try:
        async with aiohttp.ClientSession() as http, http.post(
                proxy.url + "/v1/chat/completions", json={"messages": MESSAGES}) as r:
            assert r.status == 502 and "unreachable" in (await r.json())["error"]["message"]
    finally:
        await proxy.close()
    assert native.read(tmp_path / "r.parquet").sessions == []


def test_addresses() -> None:
    assert upstream_root("http://h:8000/v1/") == upstream_root("http://h:8000") == \
        "http://h:8000"
    assert upstream_root("https://gw/openai/v1") == "https://gw/openai"
    assert parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_listen("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError):
        parse_listen("8080")


def test_cli_refuses_to_overwrite_and_rebuilds(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    out = tmp_path / "r.parquet"

    async def one_call() -> None:
        up = Upstream()
        runner, url = await serve_app(up.app)
        proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
        async with aiohttp.ClientSession() as http, http.post(
                proxy.url + "/v1/chat/completions", json={"messages": MESSAGES}) as r:
            assert r.status == 200
        await proxy.close()
        await runner.cleanup()

    asyncio.run(one_call())
    cli = CliRunner()
    res = cli.invoke(app, ["record", "--upstream", "http://127.0.0.1:9", "-o", str(out)])
    assert res.exit_code == 2 and "exists" in res.output
    res = cli.invoke(app, ["record", "-o", str(out)])
    assert res.exit_code == 2 and "--upstream" in res.output
    out.unlink()  # as after a SIGKILL before the first write: the journal is enough
    res = cli.invoke(app, ["record", "--rebuild", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "1 calls in 1 session(s)" in res.output and len(native.read(out).sessions) == 1
