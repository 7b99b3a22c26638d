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


@pytest.mark.parametrize(("method", "path", "status"), [
    ("POST", "/v1/nosuch", 404), ("GET", "/v1/chat/completions", 405),
    ("DELETE", "/v1/completions", 405), ("POST", "/v1/models", 405),
    ("GET", "/v1/responses", 405)])
async def test_an_unknown_route_or_method_is_an_openai_error(method: str, path: str,
                                                             status: int) -> None:
    """A path the simulator does not serve, or a method its route does not take: the
    status in OpenAI's (vLLM's) error shape, as every other refusal; it was aiohttp's
    plain text ``404: Not Found``, which a client reading the error's JSON cannot parse."""
    async with sim(preset="instant") as (_, s), s.request(method, path, json={}) as r:
        assert r.status == status
        doc = await r.json()
        assert doc["object"] == "error" and doc["code"] == status
        assert path in doc["message"] and method in doc["message"]


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/messages", 405), ("POST", "/v1/messages/count_tokens", 404)])
async def test_an_unknown_messages_route_is_an_anthropic_error(method: str, path: str,
                                                               status: int) -> None:
    """Under ``/v1/messages`` the refusal is in Anthropic's shape, as the route's own."""
    async with sim(preset="instant") as (_, s), s.request(method, path, json={}) as r:
        assert r.status == status
        doc = await r.json()
        assert doc["type"] == "error" and path in doc["error"]["message"]
        assert doc["error"]["type"] == ("not_found_error" if status == 404
                                        else "invalid_request_error")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_n_null_is_one_choice_and_n_2_says_what_it_got(path: str) -> None:
    """``"n": null`` is OpenAI's default (one choice; clients that send every field send
    it): served. It was refused as ``n > 1 is not supported``; a refused ``n`` now names
    what it got."""
    body = {"messages": [{"role": "user", "content": "hi"}], "prompt": "hi", "max_tokens": 2}
    async with sim(preset="instant") as (_, s):
        async with s.post(path, json={**body, "n": None}) as r:
            assert r.status == 200, await r.text()
            assert len((await r.json())["choices"]) == 1
        for n in (2, 0, "1"):
            async with s.post(path, json={**body, "n": n}) as r:
                assert r.status == 400
                assert f"got {n!r}" in (await r.json())["message"]
