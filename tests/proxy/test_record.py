"""``agentbench record`` end to end: a scripted agent (an OpenAI-style client with
tool-call turns, a subagent with its own growing context started mid-task, pauses) runs
through the recording proxy against the embedded simulator; the recorded trace matches
the script's ground truth, replays with the same prompt sizes in the same order, and holds
no planted secret."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentbench.proxy import RecordConfig, rebuild, start_proxy
from agentbench.proxy.store import journal_path, read_meta
from agentbench.scenario.model import Scenario, SimulatedEndpoint
from agentbench.sim import start_simulator
from agentbench.traces.readers import native
from agentbench.traces.words import chat_prompt_tokens

pytestmark = pytest.mark.timeout(120)

SECRET = "sk-planted-7f3a9c51e2d84b06"
API_KEY = "planted-api-key-4411"
#: think time as recorded (arrival - previous response end, at the proxy) vs the client's
#: own gap (next send - response received): the proxy stamps the end before the client
#: reads it and the arrival after the client sent, so recorded >= client gap (less the
#: few microseconds between the last write and its stamp); slack above for 2 busy cores.
THINK_BELOW_S, THINK_ABOVE_S = 0.002, 0.2


@dataclass
class Sent:
    """Ground truth of one call, as the agent saw it."""

    agent: str
    turn: int
    prompt_tokens: int
    output_tokens: int
    sent: float
    received: float
    stream: bool
    usage: bool


@dataclass
class Agent:
    """A minimal coding agent: a message list that grows by reply + tool result."""

    name: str
    http: aiohttp.ClientSession
    log: list[Sent]
    messages: list[dict[str, Any]] = field(default_factory=list)

    async def call(self, max_tokens: int, *, stream: bool, usage: bool = True) -> str:
        body: dict[str, Any] = {"model": "sim", "messages": self.messages,
                                "max_tokens": max_tokens, "ignore_eos": True,
                                "stream": stream}
        if stream and usage:
            body["stream_options"] = {"include_usage": True}
        sent = time.perf_counter()
        async with self.http.post("/v1/chat/completions", json=body) as r:
            assert r.status == 200, await r.text()
            if stream:
                text = ""
                async for raw in r.content:
                    line = raw.decode().strip()
                    if line.startswith("data: {"):
                        for ch in json.loads(line[6:])["choices"]:
                            text += ch["delta"].get("content") or ""
            else:
                text = (await r.json())["choices"][0]["message"]["content"]
        received = time.perf_counter()
        self.log.append(Sent(self.name, sum(s.agent == self.name for s in self.log),
                             chat_prompt_tokens(m["content"] for m in self.messages),
                             max_tokens, sent, received, stream, usage or not stream))
        self.messages.append({"role": "assistant", "content": text})
        return text

    def tool_result(self, call_id: str, output: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})


def tool_output(k: int, lines: int) -> str:
    return "\n".join(f"src/module_{k}/file_{i}.py:{i * 7}: def handler_{i}(request, ctx):"
                     for i in range(lines))


PAUSES = [0.25, 0.6, 0.4, 0.5, 0.3]  # tool time after each parent turn
SUB_PAUSES = [0.35, 0.2]


async def scripted_session(url: str) -> list[Sent]:
    """Parent: 5 turns; after its turn 2 it runs a subagent (fresh system prompt, 3 turns
    with pauses) and resumes with the subagent's answer as the tool result."""
    log: list[Sent] = []
    headers = {"Authorization": f"Bearer {SECRET}", "api-key": API_KEY}
    async with aiohttp.ClientSession(base_url=url, headers=headers) as http:
        parent = Agent("parent", http, log, [
            {"role": "system", "content": "You are a coding agent. " * 40},
            {"role": "user", "content": "Fix the failing test in tests/test_io.py."}])
        modes = [(True, True), (False, True), (True, False), (True, True), (False, True)]
        for k in range(5):
            stream, usage = modes[k]
            await parent.call(24 + 8 * k, stream=stream, usage=usage)
            if k == 2:  # the reply asked for a subagent: it runs while the parent waits
                sub = Agent("sub", http, log, [
                    {"role": "system", "content": "You explore a codebase. " * 25},
                    {"role": "user", "content": "Find every caller of handler_3."}])
                for j in range(3):
                    await sub.call(16, stream=j != 1)
                    if j < 2:
                        sub.tool_result(f"call_s{j}", tool_output(100 + j, 30))
                        await asyncio.sleep(SUB_PAUSES[j])
                parent.tool_result("call_task", sub.messages[-1]["content"])
            else:
                parent.tool_result(f"call_{k}", tool_output(k, 20 + 15 * k))
            if k < 4:
                await asyncio.sleep(PAUSES[k])
    return log


async def _record(out: Path) -> list[Sent]:
    sim = await start_simulator(SimulatedEndpoint.model_validate(
        {"kind": "simulated", "preset": "instant"}), in_process=True)
    proxy = await start_proxy(RecordConfig(upstream=sim.url + "/v1", out=out, port=0))
    try:
        log = await asyncio.wait_for(scripted_session(proxy.url), 60)
    finally:
        await proxy.close()
        await sim.close()
    return log


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Sent]]:
    out = tmp_path_factory.mktemp("rec") / "agent.parquet"
    return out, asyncio.run(_record(out))


def test_sessions_turns_and_tokens(recording: tuple[Path, list[Sent]]) -> None:
    out, log = recording
    trace = native.read(out)
    assert [s.relation for s in trace.sessions] == ["root", "spawn"]
    root, sub = trace.sessions
    assert sub.parent_id == root.session_id
    assert (sub.parent_turn, sub.join_turn) == (2, 3)  # started after turn 2, joined at 3
    for s, name in ((root, "parent"), (sub, "sub")):
        truth = [x for x in log if x.agent == name]
        assert len(s.turns) == len(truth)
        for turn, x in zip(s.turns, truth, strict=True):
            assert turn.input_tokens == x.prompt_tokens
            assert turn.output_tokens == x.output_tokens
            assert (turn.cached_tokens is not None) == x.usage
            assert len(turn.hash_ids) == -(-x.prompt_tokens // 64)
        for a, b in zip(s.turns, s.turns[1:], strict=False):  # each prompt extends the previous one
            full = a.input_tokens // 64
            assert list(b.hash_ids[:full]) == list(a.hash_ids[:full])
    # the subagent's context is its own
    assert root.turns[0].hash_ids[0] != sub.turns[0].hash_ids[0]
    tab = pq.read_table(out)
    assert tab.column("usage_reported").to_pylist() == [x.usage for x in sorted(
        log, key=lambda x: (x.agent != "parent", x.turn))]
    assert "request_text" not in tab.column_names


def test_think_times_and_start(recording: tuple[Path, list[Sent]]) -> None:
    out, log = recording
    trace = native.read(out)
    for s, name in ((trace.sessions[0], "parent"), (trace.sessions[1], "sub")):
        truth = [x for x in log if x.agent == name]
        for k in range(1, len(truth)):
            gap = truth[k].sent - truth[k - 1].received
            assert gap - THINK_BELOW_S <= s.turns[k].think_s <= gap + THINK_ABOVE_S, (name, k)
            api = truth[k].received - truth[k].sent
            assert s.turns[k].api_s is not None and s.turns[k].api_s <= api + THINK_BELOW_S
    parent = [x for x in log if x.agent == "parent"]
    sub = [x for x in log if x.agent == "sub"]
    assert trace.sessions[0].turns[0].think_s == 0
    # a child's first think time counts from the end of its parent's parent_turn (2), when
    # replay starts it
    gap = sub[0].sent - parent[2].received
    assert gap - THINK_BELOW_S <= trace.sessions[1].turns[0].think_s <= gap + THINK_ABOVE_S
    # the join turn's think time covers the whole subagent
    assert trace.sessions[0].turns[3].think_s >= sub[-1].received - sub[0].sent
    # the proxy stamps arrivals: the subagent's first arrived after it was sent, the
    # parent's first before its answer came back (a busy machine delays arrivals by ms)
    start = sub[0].sent - parent[0].sent
    earliest = sub[0].sent - parent[0].received
    assert earliest <= trace.sessions[1].start_s <= start + THINK_ABOVE_S


def test_file_states_what_it_holds_and_no_secret(recording: tuple[Path, list[Sent]]) -> None:
    out, _ = recording
    meta = read_meta(out)
    assert meta["keep_text"] is False and meta["block_size"] == 64
    assert meta["recorder"].startswith("agentbench record")
    assert any("prompt and response text" in x for x in meta["not_stored"])
    assert any("Authorization" in x for x in meta["not_stored"])
    for f in (out, journal_path(out)):
        data = f.read_bytes()
        for planted in (SECRET, API_KEY):
            assert planted.encode() not in data, f
        assert b"coding agent" not in data  # no prompt text without --keep-text


def test_stats_and_rebuild(recording: tuple[Path, list[Sent]], tmp_path: Path) -> None:
    from agentbench.cli import app

    out, _ = recording
    res = CliRunner().invoke(app, ["traces", "stats", str(out), "--json"])
    assert res.exit_code == 0, res.output
    st = json.loads(res.output)
    assert st["sessions"] == 2 and st["roots"] == 1
    assert st["roots_with_subagents_share"] == 1.0
    copy = tmp_path / out.name
    journal_path(copy).write_bytes(journal_path(out).read_bytes())
    rebuilt, recorded = rebuild(copy), native.read(out)  # the journal alone rebuilds it
    assert [(s.session_id, s.parent_id, s.relation, s.parent_turn, s.join_turn, s.start_s,
             s.turns) for s in rebuilt.sessions] == [
        (s.session_id, s.parent_id, s.relation, s.parent_turn, s.join_turn, s.start_s,
         s.turns) for s in recorded.sessions]


def test_replay_sends_the_same_prompt_sizes_in_order(recording: tuple[Path, list[Sent]],
                                                     tmp_path: Path) -> None:
    from agentbench.replay import run
    from agentbench.results import schema as records

    out, log = recording
    trace = native.read(out)
    sc = Scenario.model_validate({
        "name": "rec", "endpoints": [{"kind": "simulated", "name": "sim", "preset": "instant"}],
        "trace": {"kind": "file", "source": str(out)}, "load": {"kind": "lanes",
                                                                 "concurrency": 1},
        "limits": {"recycle": False}, "output": {"dir": str(tmp_path), "run_id": "r"}})
    res = run(sc, trace=trace, progress=False)
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    req = req.sort_values("sent_ns")
    assert (req.status == "ok").all()
    truth = sorted(log, key=lambda x: x.sent)
    assert req.prompt_tokens.tolist() == [x.prompt_tokens for x in truth]
    assert req.completion_tokens.tolist() == [x.output_tokens for x in truth]
