"""``agentbench record`` of the Responses and Messages APIs: a scripted Codex-style session
(Responses, streamed and not, its output sent back as input items) and a scripted Claude
Code-style session (Messages, ``cache_control`` breakpoints, a subagent with its own system
prompt started mid-task) run through the recording proxy against the simulator. The trace
has the sessions and subagent of the script, the prompt sizes the server reported, the
breakpoints, no planted key, and replays with the same prompt sizes in the same order."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow.parquet as pq
import pytest

from agentbench.proxy import RecordConfig, start_proxy
from agentbench.scenario.model import Scenario, SimulatedEndpoint
from agentbench.sim import start_simulator
from agentbench.traces.readers import native
from agentbench.transport.apis import read_stream
from tests.proxy.test_record import tool_output

pytestmark = pytest.mark.timeout(120)

KEY = "sk-ant-planted-0b7e55d1c2"


async def _post(http: aiohttp.ClientSession, path: str, body: dict[str, Any]
                ) -> tuple[str, int]:
    """(the reply's text, the prompt tokens the server reported) of one call."""
    async with http.post(path, json=body) as r:
        assert r.status == 200, await r.text()
        if not body.get("stream"):
            doc = await r.json()
            if path.endswith("/responses"):
                return doc["output"][0]["content"][0]["text"], doc["usage"]["input_tokens"]
            u = doc["usage"]
            return doc["content"][0]["text"], u["input_tokens"] + u["cache_read_input_tokens"]
        chunks = [c async for c in r.content.iter_any()]
    api = "responses" if path.endswith("/responses") else "messages"
    st = read_stream(api, chunks, [0] * len(chunks))
    assert st.error_type is None and st.prompt_tokens is not None
    text = "".join(json.loads(line[6:]).get("delta", "") if api == "responses" else
                   json.loads(line[6:])["delta"].get("text", "")
                   for line in b"".join(chunks).decode().splitlines()
                   if line.startswith("data: ") and ('"response.output_text.delta"' in line
                                                    or '"text_delta"' in line))
    return text, st.prompt_tokens


async def codex_session(http: aiohttp.ClientSession, log: list[tuple[str, int, int]]) -> None:
    """Four Responses turns; each sends back the whole input (``store: false``) with the
    reply as an assistant message item and the tool's output as a user item."""
    items: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "input_text", "text": "Fix the failing test in tests/test_io.py."}]}]
    for k in range(4):
        body = {"model": "sim", "instructions": "You are Codex. " * 30, "input": items,
                "max_output_tokens": 12 + 4 * k, "ignore_eos": True, "stream": k != 1,
                "store": False}
        text, prompt = await _post(http, "/v1/responses", body)
        log.append(("codex", prompt, 12 + 4 * k))
        items = [*items, {"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": text}]},
                 {"role": "user", "content": [{"type": "input_text",
                                               "text": tool_output(k, 10 + 5 * k)}]}]
        await asyncio.sleep(0.15)


async def claude_session(http: aiohttp.ClientSession, log: list[tuple[str, int, int]]
                         ) -> None:
    """Three Messages turns of a parent; after its first, a subagent (its own system
    prompt) runs two turns while the parent waits. Each call marks the system prompt and
    the last user block with cache_control, as Claude Code does."""

    def body(system: str, msgs: list[dict[str, Any]], n: int, stream: bool) -> dict:
        last = msgs[-1]
        marked = [*msgs[:-1], {"role": "user", "content": [
            {"type": "text", "text": last["content"][0]["text"],
             "cache_control": {"type": "ephemeral"}}]}]
        return {"model": "sim", "max_tokens": n, "ignore_eos": True, "stream": stream,
                "system": [{"type": "text", "text": system,
                            "cache_control": {"type": "ephemeral"}}],
                "messages": marked}

    def user(text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": text}]}

    parent = [user("Refactor the IO module.")]
    for k in range(3):
        text, prompt = await _post(http, "/v1/messages",
                                   body("You are Claude Code. " * 40, parent, 10 + k, True))
        log.append(("claude", prompt, 10 + k))
        parent.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        if k == 0:
            sub = [user("Find every caller of read_file.")]
            for j in range(2):
                stext, sprompt = await _post(http, "/v1/messages", body(
                    "You explore a codebase. " * 20, sub, 8, j == 0))
                log.append(("sub", sprompt, 8))
                sub += [{"role": "assistant", "content": [{"type": "text", "text": stext}]},
                        user(tool_output(50 + j, 12))]
                await asyncio.sleep(0.15)
            parent.append(user(sub[-2]["content"][0]["text"]))
        else:
            parent.append(user(tool_output(20 + k, 15)))
        await asyncio.sleep(0.15)


async def _record(out: Path, script: Any) -> list[tuple[str, int, int]]:
    sim = await start_simulator(SimulatedEndpoint.model_validate(
        {"kind": "simulated", "preset": "instant"}), in_process=True)
    proxy = await start_proxy(RecordConfig(upstream=sim.url + "/v1", out=out, port=0))
    log: list[tuple[str, int, int]] = []
    try:
        async with aiohttp.ClientSession(base_url=proxy.url, headers={
                "x-api-key": KEY, "anthropic-version": "2023-06-01"}) as http:
            await asyncio.wait_for(script(http, log), 60)
    finally:
        await proxy.close()
        await sim.close()
    return log


def _replayed_prompts(trace_path: Path, tmp_path: Path, api: str) -> list[int]:
    from agentbench.replay import run
    from agentbench.results import schema as records

    sc = Scenario.model_validate({
        "name": "rec", "endpoints": [{"kind": "simulated", "name": "sim", "preset": "instant",
                                      "api": api}],
        "trace": {"kind": "file", "source": str(trace_path)},
        "load": {"kind": "lanes", "concurrency": 1}, "limits": {"recycle": False},
        "output": {"dir": str(tmp_path), "run_id": api}})
    res = run(sc, trace=native.read(trace_path), progress=False)
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    assert (req.status == "ok").all()
    return req.sort_values("sent_ns").prompt_tokens.tolist()


def test_a_responses_session_is_recorded_and_replays(tmp_path: Path) -> None:
    out = tmp_path / "codex.parquet"
    log = asyncio.run(_record(out, codex_session))
    trace = native.read(out)
    assert len(trace.sessions) == 1  # every turn continues the one before
    turns = trace.sessions[0].turns
    assert [t.input_tokens for t in turns] == [p for _, p, _ in log]
    assert [t.output_tokens for t in turns] == [n for _, _, n in log]
    assert all(b.think_s >= 0.1 for b in turns[1:])
    assert KEY.encode() not in out.read_bytes()
    assert _replayed_prompts(out, tmp_path, "responses") == [p for _, p, _ in log]


def test_a_messages_session_with_a_subagent_is_recorded_and_replays(tmp_path: Path) -> None:
    out = tmp_path / "claude.parquet"
    log = asyncio.run(_record(out, claude_session))
    trace = native.read(out)
    roots = trace.roots()
    assert len(roots) == 1 and len(trace.sessions) == 2
    parent = roots[0]
    child = next(s for s in trace.sessions if s is not parent)
    assert child.relation == "spawn" and child.parent_id == parent.session_id
    assert child.parent_turn == 0 and child.join_turn == 1
    assert [t.input_tokens for t in parent.turns] == [p for a, p, _ in log if a == "claude"]
    assert [t.input_tokens for t in child.turns] == [p for a, p, _ in log if a == "sub"]
    tab = pq.read_table(out).to_pandas()
    assert (tab.path == "/v1/messages").all()
    for marks, n in zip(tab.cache_breakpoints, tab.input_tokens, strict=True):
        # the system prompt's end, then the last user message's end (the whole prompt but
        # the reply primer)
        assert len(marks) == 2 and 0 < marks[0] < marks[1] <= n
    assert KEY.encode() not in out.read_bytes()
    # replayed through Messages and through chat: the prompt sizes the server reported, in
    # the order they were sent (the subagent's two calls between the parent's first two)
    want = [p for _, p, _ in log]
    assert _replayed_prompts(out, tmp_path, "messages") == want
    assert _replayed_prompts(out, tmp_path, "chat") == want
