"""Replay's fixtures: agentbench's fake OpenAI server (``agentbench.testing.fakeserver``) at
its default settings, in the test's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentbench.testing.fakeserver import FakeServer, ServerConfig


@pytest.fixture
async def fake_server() -> AsyncIterator[FakeServer]:
    srv = FakeServer(ServerConfig())
    await srv.start()
    yield srv
    await srv.close()


@pytest.fixture
async def fake_servers() -> AsyncIterator[list[FakeServer]]:
    """Two of them (routing between endpoints)."""
    out = []
    for _ in range(2):
        srv = FakeServer(ServerConfig())
        await srv.start()
        out.append(srv)
    yield out
    for srv in out:
        await srv.close()
