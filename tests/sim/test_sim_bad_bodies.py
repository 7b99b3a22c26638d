"""The simulator over HTTP against bodies it cannot read: a 400 naming why, on every API
(a 500 with a traceback in the server's log before)."""

from __future__ import annotations

import pytest

from tests.sim.test_sim_server import sim

pytestmark = pytest.mark.timeout(60)

DEEP = b'{"model": "sim", "max_tokens": 3, "messages": ' + b"[" * 100_000 + b"]" * 100_000 \
    + b"}"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions",
                                  "/v1/responses", "/v1/messages"])
async def test_a_body_nested_too_deep_or_not_decodable_is_a_400(path: str) -> None:
    async with sim(preset="instant") as (_, s):
        for data, headers, why in (
                (DEEP, {}, "nested too deep"),
                (b'{"model": "sim"}', {"Content-Encoding": "gzip"}, "unreadable")):
            async with s.post(path, data=data, headers=headers) as r:
                assert r.status == 400, await r.text()
                doc = await r.json()
                assert why in (doc.get("error") or doc)["message"]  # Anthropic's or OpenAI's
