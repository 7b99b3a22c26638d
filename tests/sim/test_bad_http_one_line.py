"""A malformed HTTP request to ``serve-sim`` (or ``record``'s proxy: the same filter) gets
its 400 and one log line, not aiohttp's "Error handling request" traceback."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import pytest

from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim.launch import start_simulator

BAD = [
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Session-ID: " + b"a" * 100_000 + b"\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Session-ID: \x7f\x00\r\n\r\n",
]


@pytest.mark.parametrize("raw", BAD, ids=["long-header", "negative-length", "control"])
def test_a_malformed_request_is_a_400_and_one_log_line(raw: bytes,
                                                       caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    async def go() -> bytes:
        h = await start_simulator(SimulatedEndpoint(kind="simulated", preset="instant"),
                                  in_process=True)
        try:
            u = urlsplit(h.url)
            r, w = await asyncio.open_connection(u.hostname, u.port)
            w.write(raw)
            await w.drain()
            head = await asyncio.wait_for(r.readline(), 10)
            w.close()
            # the server still serves
            r2, w2 = await asyncio.open_connection(u.hostname, u.port)
            w2.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            ok = await asyncio.wait_for(r2.readline(), 10)
            w2.close()
            assert ok.startswith(b"HTTP/1.1 200")
            return head
        finally:
            await h.close()

    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        head = asyncio.run(go())
    assert head.split()[1] == b"400", head
    said = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert said, "nothing logged"  # the request is still noted, in one line
    for r in said:
        assert r.exc_info is None and "\n" not in r.getMessage(), r.getMessage()
        assert "bad HTTP" in r.getMessage()
