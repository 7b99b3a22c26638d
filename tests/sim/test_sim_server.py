"""The simulator over real HTTP (aiohttp client in the test): OpenAI surface, usage,
streaming shape, /metrics agreeing with usage, session routing, disconnects, TTFT."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim import SESSION_HEADER, SimHandle, start_simulator
from agentbench.traces.words import block_text, chat_prompt_tokens, count_tokens

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def sim(**kw: Any) -> AsyncIterator[tuple[SimHandle, aiohttp.ClientSession]]:
    cfg = SimulatedEndpoint.model_validate({"kind": "simulated", **kw})
    handle = await start_simulator(cfg, in_process=True)  # tests read handle.cluster
    try:
        async with aiohttp.ClientSession(base_url=handle.url) as s:
            yield handle, s
    finally:
        await handle.close()


async def sse(resp: aiohttp.ClientResponse) -> list[tuple[float, Any]]:
    """(arrival perf_counter, parsed event) of every SSE data line; '[DONE]' kept as str."""
    out: list[tuple[float, Any]] = []
    async for raw in resp.content:
        line = raw.decode().strip()
        if not line:
            continue
        assert line.startswith("data: ")
        data = line[6:]
        out.append((time.perf_counter(), data if data == "[DONE]" else json.loads(data)))
    return out


def text_of(n_blocks: int, salt: int = 1) -> str:
    return "".join(block_text(salt, h, 64) for h in range(n_blocks))


async def test_chat_stream_shape_and_usage() -> None:
    async with sim(preset="instant") as (_, s):
        content = text_of(10) + " and a tail."
        body = {"model": "sim", "messages": [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": content}],
                "max_tokens": 7, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        async with s.post("/v1/chat/completions", json=body) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            events = [e for _, e in await asyncio.wait_for(sse(r), 10)]
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        tokens = [c for c in chunks[1:] if c["choices"]]
        assert len(tokens) == 7  # one token per event, exactly max_tokens
        assert all(c["choices"][0]["delta"]["content"] for c in tokens)
        assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 6 + ["length"]
        usage_chunk = chunks[-1]
        assert usage_chunk["choices"] == []
        assert usage_chunk["usage"] == {
            "prompt_tokens": chat_prompt_tokens(["be brief", content]),
            "completion_tokens": 7, "total_tokens": chat_prompt_tokens(["be brief", content])
            + 7, "prompt_tokens_details": {"cached_tokens": 0}}


async def test_completions_token_ids_text_and_min_tokens() -> None:
    async with sim(preset="instant") as (_, s):
        ids = list(range(1000, 1300))
        body = {"model": "sim", "prompt": ids, "max_tokens": 5, "min_tokens": 5,
                "stream": True, "stream_options": {"include_usage": True}}
        async with s.post("/v1/completions", json=body) as r:
            events = [e for _, e in await asyncio.wait_for(sse(r), 10)]
        texts = [e for e in events[:-1] if e["choices"]]
        assert len(texts) == 5 and texts[-1]["choices"][0]["finish_reason"] == "length"
        assert events[-2]["choices"] == [] and events[-2]["usage"]["prompt_tokens"] == 300
        # The same ids again: every full block but the last token's is cached.
        async with s.post("/v1/completions", json={**body, "stream": False}) as r:
            out = await r.json()
        assert out["object"] == "text_completion"
        assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == (300 - 1) // 16 * 16
        assert len(out["choices"][0]["text"].split()) == 5
        prompt = "def main():\n    return 42  # the answer\n"
        async with s.post("/v1/completions", json={"model": "sim", "prompt": prompt,
                                                   "max_tokens": 2}) as r:
            out = await r.json()
        assert out["usage"]["prompt_tokens"] == count_tokens(prompt)
        assert 1 <= out["usage"]["completion_tokens"] <= 2


async def test_natural_length_without_ignore_eos_respects_bounds() -> None:
    async with sim(preset="instant") as (_, s):
        for i in range(5):
            body = {"model": "sim", "messages": [{"role": "user", "content": text_of(2, i)}],
                    "max_tokens": 40, "min_tokens": 3}
            async with s.post("/v1/chat/completions", json=body) as r:
                out = await r.json()
            n = out["usage"]["completion_tokens"]
            assert 3 <= n <= 40
            assert out["choices"][0]["finish_reason"] == ("length" if n == 40 else "stop")


async def test_models_health_and_errors() -> None:
    async with sim(preset="instant", model="m1", cache_blocks=100) as (_, s):
        async with s.get("/v1/models") as r:
            assert (await r.json())["data"][0]["id"] == "m1"
        async with s.get("/health") as r:
            assert r.status == 200
        async with s.post("/v1/chat/completions", data=b"{not json") as r:
            err = await r.json()
            assert r.status == 400 and err["type"] == "BadRequestError"
        async with s.post("/v1/chat/completions", json={"model": "other", "messages": [
                {"role": "user", "content": "hi"}]}) as r:
            assert r.status == 404
        async with s.post("/v1/chat/completions", json={"model": "m1", "messages": []}) as r:
            assert r.status == 400
        async with s.post("/v1/chat/completions", json={"model": "m1", "max_tokens": 0,
                                                        "messages": [{"role": "user",
                                                                      "content": "x"}]}) as r:
            assert r.status == 400 and "max_tokens" in (await r.json())["message"]
        # 100 blocks x 16 tokens cannot hold a 2,000-token prompt.
        async with s.post("/v1/completions", json={"model": "m1", "prompt": [1] * 2000,
                                                   "max_tokens": 1}) as r:
            assert r.status == 400 and "KV blocks" in (await r.json())["message"]


def _samples(text: str) -> dict[str, float]:
    """Sum of every sample by name over instances (histogram _count/_sum included)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name.endswith("_bucket"):
                continue
            out[smp.name] = out.get(smp.name, 0.0) + smp.value
    return out


async def test_metrics_agree_exactly_with_usage_over_a_run() -> None:
    async with sim(preset="h200-llama3-70b", speedup=2000, instances=3,
                   router="session_affinity", cache_blocks=3000) as (h, s):
        usages: list[dict[str, Any]] = []

        async def agent(sid: int) -> None:
            for turn in range(4):
                content = text_of(20 + 15 * turn, salt=sid)
                body = {"model": "sim", "messages": [{"role": "user", "content": content}],
                        "max_tokens": 12, "ignore_eos": turn % 2 == 0, "stream": turn != 3,
                        "stream_options": {"include_usage": True}}
                async with s.post("/v1/chat/completions", json=body,
                                  headers={SESSION_HEADER: f"agent-{sid}"}) as r:
                    if body["stream"]:
                        usages.append((await sse(r))[-2][1]["usage"])
                    else:
                        usages.append((await r.json())["usage"])

        await asyncio.wait_for(asyncio.gather(*(agent(i) for i in range(5))), 30)
        async with s.get("/metrics") as r:
            m = _samples(await r.text())
        prompt = sum(u["prompt_tokens"] for u in usages)
        cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
        completion = sum(u["completion_tokens"] for u in usages)
        assert len(usages) == 20
        assert m["vllm:prompt_tokens_total"] == prompt
        assert m["vllm:prefix_cache_queries_total"] == prompt
        assert m["vllm:prefix_cache_hits_total"] == cached
        assert m["vllm:generation_tokens_total"] == completion
        assert m["vllm:time_to_first_token_seconds_count"] == 20
        assert m["vllm:request_success_total"] == 20
        assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
        assert cached > 0.5 * prompt  # affinity: later turns hit their earlier prefix
        assert len(set(h.cluster.router.sessions.values())) == 3  # spread over 3 instances


async def test_session_key_from_user_field_and_header() -> None:
    async with sim(preset="instant", instances=4, router="session_affinity") as (h, s):
        for i in range(8):
            body = {"model": "sim", "messages": [{"role": "user", "content": text_of(3)}],
                    "max_tokens": 1, "user": "u1"}
            headers = {SESSION_HEADER: "h1"} if i % 2 else {}
            async with s.post("/v1/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200
        assert set(h.cluster.router.sessions) == {"u1", "h1"}
        insts = h.cluster.instances
        assert sum(i.stats.requests_admitted > 0 for i in insts) == 2  # one per session key


async def test_client_disconnect_releases_blocks(caplog: pytest.LogCaptureFixture) -> None:
    """A client gone mid-stream: its request is aborted, its blocks released, and the
    server says nothing of it (it printed aiohttp's traceback for every such client)."""
    async with sim(preset="h200-llama3-70b", speedup=50, cache_blocks=5000) as (h, s):
        body = {"model": "sim", "messages": [{"role": "user", "content": text_of(30)}],
                "max_tokens": 5000, "ignore_eos": True, "stream": True}
        inst = h.cluster.instances[0]
        async with s.post("/v1/chat/completions", json=body) as r:
            n = 0
            async for raw in r.content:
                n += raw.startswith(b"data: ")
                if n >= 3:
                    break
            assert inst.running and inst.gpu.reserved > 0
            r.close()

        async def released() -> None:
            while inst.running or inst.gpu.reserved:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(released(), 10)
        assert inst.stats.finished["abort"] == 1
        assert len(inst.gpu) > 0 and len(inst.gpu.lru_order()) == len(inst.gpu)  # unpinned
        await asyncio.sleep(0.2)  # the handler's next write meets the closed connection
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not errors, [r.getMessage() for r in errors]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_a_slow_client_that_resets_mid_stream_is_no_traceback(
        path: str, caplog: pytest.LogCaptureFixture) -> None:
    """A client that reads too slowly (the server waits for its socket to drain) and then
    resets the connection: nothing in the server's log. aiohttp raises a plain
    ``ConnectionError("Connection lost")`` there, not a ``ConnectionResetError``, so the
    server printed "Error handling request" and two tracebacks for each such client."""
    async with sim(preset="instant") as (h, _):
        body = json.dumps({"model": "sim", "messages": [{"role": "user", "content": "x"}],
                           "max_tokens": 50_000, "ignore_eos": True, "stream": True}).encode()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slow reader
        sock.setblocking(False)
        host, port = h.runner.addresses[0][:2]
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
        _, writer = await asyncio.open_connection(sock=sock)
        writer.write(f"POST {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json"
                     f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        assert h.runner.server is not None

        async def paused() -> None:  # the server waits for the client to read
            while not any(c.writing_paused for c in h.runner.server.connections):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(paused(), 10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()  # a reset (RST), as a client killed or timed out sends

        async def gone() -> None:
            while h.runner.server.connections:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(gone(), 10)
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not errors, [r.getMessage() for r in errors]


async def test_ttft_responds_to_cache_hits() -> None:
    speedup = 20.0
    async with sim(preset="h200-llama3-70b", speedup=speedup) as (h, s):
        content = text_of(400)  # 25,603-token prompt
        body = {"model": "sim", "messages": [{"role": "user", "content": content}],
                "max_tokens": 2, "ignore_eos": True, "stream": True}
        ttft = []
        for _ in range(2):
            t0 = time.perf_counter()
            async with s.post("/v1/chat/completions", json=body) as r:
                ev = await asyncio.wait_for(sse(r), 20)
            first = next(t for t, e in ev if e != "[DONE]" and e["choices"]
                         and e["choices"][0]["delta"].get("content"))
            ttft.append(first - t0)
        p = h.cluster.preset
        n = chat_prompt_tokens([content])
        # Cold: at least the prefill compute of every token (chunks of the step budget).
        lin = n * 2 * p.params * p.s_per_flop
        assert ttft[0] >= lin / speedup
        assert ttft[0] > 5 * ttft[1]  # warm: only the last block is computed


async def test_close_with_requests_in_flight_is_prompt() -> None:
    cfg = SimulatedEndpoint.model_validate({"kind": "simulated", "speedup": 1.0})
    handle = await start_simulator(cfg)
    body = {"model": "sim", "messages": [{"role": "user", "content": text_of(5)}],
            "max_tokens": 100_000, "ignore_eos": True, "stream": True}
    async with aiohttp.ClientSession(base_url=handle.url) as s, \
            s.post("/v1/chat/completions", json=body) as r:
        first = await asyncio.wait_for(r.content.readline(), 10)  # streaming has begun
        assert first.startswith(b"data: ")
        t0 = time.perf_counter()
        await asyncio.wait_for(handle.close(), 10)
        rest = await asyncio.wait_for(r.content.read(), 10)
    assert time.perf_counter() - t0 < 5
    assert b"aborted" in rest or rest == b""


def test_serve_sim_cli_lists_presets_and_rejects_bad_options() -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["serve-sim", "--list-presets"])
    assert out.exit_code == 0 and "h200-llama3-70b" in out.output and "TensorRT-LLM" in out.output
    bad = runner.invoke(app, ["serve-sim", "--preset", "nope"])
    assert bad.exit_code == 2 and "unknown simulator preset 'nope'" in bad.output
    bad = runner.invoke(app, ["serve-sim", "--router", "sticky"])
    assert bad.exit_code == 2 and "router" in bad.output
    for port in ("70000", "-1"):  # a 61-line OverflowError traceback, exit 1
        bad = runner.invoke(app, ["serve-sim", "--port", port])
        assert bad.exit_code == 2 and bad.output.strip() == \
            f"error: field 'port': expected a port of 0-65535, got {port}", bad.output
