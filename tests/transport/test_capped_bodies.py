"""The answers agentbench reads whole outside the request stream (a /metrics page, the
start-up probes) are held up to a bound: an endless one is refused, not held
(docs/reliability.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from agentbench.transport import openai_http, scrape
from tests.helpers import served


@pytest.fixture
async def endless() -> AsyncIterator[str]:
    """A server whose every answer is 200 and never ends."""
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        while True:
            await resp.write(b"# junk\n" * 8192)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    async with served(app) as url:
        yield url


@pytest.mark.timeout(30)
async def test_an_endless_metrics_page_is_no_page(endless: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scrape, "MAX_METRICS_BYTES", 1 << 20)
    async with aiohttp.ClientSession() as http:
        t0 = asyncio.get_running_loop().time()
        assert await scrape.scrape_once(http, endless + "/metrics") is None
        assert asyncio.get_running_loop().time() - t0 < 5  # not the 10 s time bound


@pytest.mark.timeout(30)
async def test_an_endless_probe_answer_is_refused(endless: str) -> None:
    tr = openai_http.connect("ep", "chat", "m", endless, "", {}, aiohttp.ClientTimeout(total=20),
                             None, 0, (), False)
    try:
        t0 = asyncio.get_running_loop().time()
        assert await openai_http.probe_ignore_eos(tr, "m", {}) is False
        await openai_http.calibrate(tr, "m", {}, _Cache())
        assert "no usage.prompt_tokens" in tr.notes[-1]
        assert asyncio.get_running_loop().time() - t0 < 10
    finally:
        await tr.close()


class _Cache:
    def content(self, salt: int, segs: object, block_size: int) -> bytes:
        return b"hello world"
