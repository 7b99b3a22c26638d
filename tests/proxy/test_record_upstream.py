"""The recorder's ``--upstream`` URL with a query string (Azure's ``?api-version=...``, a
key in the query): each request goes to the URL's path with the URL's query merged into
the agent's own, and the URL is printed, stored and sent back in error bodies without
its query values or ``user:password``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agentbench.proxy import RecordConfig, start_proxy
from agentbench.proxy.store import journal_path, read_meta
from agentbench.proxy.upstream import Upstream, merged_query, shown
from agentbench.traces.readers import native
from tests.helpers import served
from tests.proxy.test_record_faults import _record_process, _stop

pytestmark = pytest.mark.timeout(60)

KEY = "RECquery5678"
PASSWORD = "pw-SECRET-9133"
MESSAGES = [{"role": "user", "content": "Say four words."}]


class Server:
    """Answers chat calls under any path, noting the path and query each one came to."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.app = web.Application()
        self.app.router.add_post("/{tail:.*}", self.chat)

    async def chat(self, request: web.Request) -> web.Response:
        self.seen.append((request.path, request.query_string))
        return web.json_response({"choices": [{"message": {"content": "one two"}}],
                                  "usage": {"prompt_tokens": 7, "completion_tokens": 2}})


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Server, str]]:
    up = Server()
    async with served(up.app) as url:
        yield up, url


async def _chat(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.post(
            url, json={"model": "m", "messages": MESSAGES}) as r:
        return r.status, await r.text()


@pytest.mark.parametrize("base", ["/v1", "/openai/v1", ""])
async def test_the_upstream_query_goes_on_every_request(
        upstream: tuple[Server, str], base: str, tmp_path: Path) -> None:
    up, url = upstream
    out = tmp_path / "rec.parquet"
    proxy = await start_proxy(RecordConfig(
        upstream=f"{url}{base}?api-version=2024-06-01&key={KEY}", out=out, port=0))
    try:
        assert (await _chat(proxy.url + "/v1/chat/completions"))[0] == 200
        # the agent's own query stays; a parameter the URL names is the URL's
        assert (await _chat(proxy.url + "/v1/chat/completions?x=1&key=agent"))[0] == 200
    finally:
        await proxy.close()
    path = base.removesuffix("/v1") + "/v1/chat/completions"
    assert up.seen == [(path, f"api-version=2024-06-01&key={KEY}"),
                       (path, f"x=1&api-version=2024-06-01&key={KEY}")]
    assert sum(len(s.turns) for s in native.read(out).sessions) == 2
    assert read_meta(out)["upstream"] == f"{url}{base}?api-version=<redacted>&key=<redacted>"
    for f in (out, journal_path(out)):
        assert KEY.encode() not in f.read_bytes()


async def test_an_unreachable_upstream_names_it_without_its_secrets(tmp_path: Path) -> None:
    proxy = await start_proxy(RecordConfig(
        upstream=f"http://alice:{PASSWORD}@127.0.0.1:9/v1?key={KEY}",
        out=tmp_path / "r.parquet", port=0))
    try:
        status, body = await _chat(proxy.url + "/v1/chat/completions")
    finally:
        await proxy.close()
    assert status == 502
    assert "upstream http://127.0.0.1:9/v1?key=<redacted> unreachable" in body, body
    for secret in (KEY, PASSWORD, "alice"):
        assert secret not in body


async def test_the_banner_shows_the_upstream_as_stored(
        upstream: tuple[Server, str], tmp_path: Path) -> None:
    up, url = upstream
    out = tmp_path / "rec.parquet"
    given = url.replace("http://", f"http://alice:{PASSWORD}@") + f"/v1?key={KEY}"
    proc, proxy_url, banner = await _record_process(given, out)
    try:
        assert (await _chat(proxy_url + "/v1/chat/completions"))[0] == 200
    finally:
        stdout, stderr = await _stop(proc)
    stored = read_meta(out)["upstream"]
    assert stored == f"{url}/v1?key=<redacted>"
    assert f"(upstream {stored})" in banner, banner
    for secret in (KEY, PASSWORD):
        assert secret not in banner + stdout + stderr
    assert up.seen == [("/v1/chat/completions", f"key={KEY}")]


def test_the_url_parts() -> None:
    up = Upstream.parse(f"https://bob:{PASSWORD}@gw.example/openai/v1/?api-version=1&k={KEY}")
    assert (up.root, up.query) == ("https://gw.example/openai", f"api-version=1&k={KEY}")
    assert up.auth is not None and up.auth.startswith("Basic ")
    # every query value is hidden, however short (``k=abc`` is below a secret's minimum)
    assert up.shown == "https://gw.example/openai/v1?api-version=<redacted>&k=<redacted>"
    assert shown("http://h/v1?k=abc&flag") == "http://h/v1?k=<redacted>&flag"
    assert up.url_for("/v1/models") == f"https://gw.example/openai/v1/models?api-version=1&k={KEY}"
    assert shown("http://h:8000") == "http://h:8000" and Upstream.parse("http://h").auth is None
    assert merged_query("", "") == "" and merged_query("a=1", "") == "a=1"
    assert merged_query("a=1&b=2", "b=3") == "a=1&b=3"
    assert merged_query("", "b=3&c") == "b=3&c"


def test_a_bad_upstream_or_listen_address_is_one_line_and_leaves_no_journal(
        tmp_path: Path) -> None:
    """``--upstream notaurl`` started and failed every call; a port past 65535 was an
    OverflowError traceback; a failed start (an unknown or taken address) exited 1 and left
    the journal, which refused the next try's ``-o``. Each is now one line, exit 2, and the
    next try may use the same ``-o``."""
    import socket

    from typer.testing import CliRunner

    from agentbench.cli import app

    out = tmp_path / "r.parquet"
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    try:
        for upstream, listen, said in (
                ("notaurl", "127.0.0.1:0", "field 'upstream': expected an http:// or https://"),
                ("http://u:pw-SECRET@:80", "127.0.0.1:0", "got 'http://:80'"),
                ("http://127.0.0.1:9", "127.0.0.1:70000", "expected a port of 0-65535"),
                ("http://127.0.0.1:9", f"127.0.0.1:{busy}",
                 f"cannot listen on 127.0.0.1:{busy} ("),
                ("http://127.0.0.1:9", "999.0.0.1:0", "cannot listen on 999.0.0.1:0 (")):
            res = CliRunner().invoke(app, ["record", "--upstream", upstream, "-o", str(out),
                                           "--listen", listen])
            lines = res.output.strip().splitlines()
            assert res.exit_code == 2 and len(lines) == 1 and said in lines[0], res.output
            assert "SECRET" not in res.output
            assert not journal_path(out).exists() and not out.exists()
    finally:
        taken.close()


async def test_an_error_event_that_echoes_the_request_stores_none_of_its_secrets(
        tmp_path: Path) -> None:
    """A stream that fails with an error event quoting the request (vLLM's ErrorResponse,
    or ``{"error": ...}``) had the text stored as the call's ``stream_error``: the upstream
    URL's query key and its ``user:password`` (sent as ``Authorization: Basic``), and the
    client's own key headers, all of which docs/record.md says are never stored."""
    import base64
    import json

    client_key = "sk-client-4411-secret"

    async def failing(request: web.Request) -> web.StreamResponse:
        said = (f"bad request to {request.url} with {request.headers.get('Authorization')}"
                f" and {request.headers.get('X-Api-Key')}")
        vllm = (await request.json())["model"] == "vllm"
        err = {"object": "error", "message": said, "type": "BadRequestError", "code": 400} \
            if vllm else {"error": {"message": said, "type": "invalid_request_error"}}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: " + json.dumps(err).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/{tail:.*}", failing)
    out = tmp_path / "rec.parquet"
    async with served(app) as url:
        proxy = await start_proxy(RecordConfig(
            upstream=url.replace("http://", f"http://alice:{PASSWORD}@") + f"/v1?key={KEY}",
            out=out, port=0))
        try:
            async with aiohttp.ClientSession() as http:
                for model in ("vllm", "openai"):
                    async with http.post(proxy.url + "/v1/chat/completions", json={
                            "model": model, "messages": MESSAGES, "stream": True},
                            headers={"X-Api-Key": client_key}) as r:
                        assert r.status == 200 and KEY in await r.text()  # relayed as sent
        finally:
            await proxy.close()
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    calls = [json.loads(line) for line in journal_path(out).read_text().splitlines()[1:]]
    assert [c["stream_error"].count("<redacted>") for c in calls] == [3, 3], calls
    for f in (out, journal_path(out)):
        for secret in (KEY, PASSWORD, basic, client_key):
            assert secret.encode() not in f.read_bytes(), (f, secret)
