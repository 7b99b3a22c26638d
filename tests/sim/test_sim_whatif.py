"""The shared-KV what-if on real Claude Code sessions (Weka traces), over HTTP: 4 instances,
round robin with local caches only, versus a shared tier, versus session affinity.

Each session's turns are sent in order (no think time), all sessions at once, as one chat
message of the turn's blocks (``block_text``) whose prompt is exactly ``input_tokens``. The
GPU caches are shrunk so that one instance holds about one session's context, as when many
agents share a cluster. Hit rates come from ``usage``; TTFT from the server's simulated
clock (free of this machine's CPU load).
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim import SESSION_HEADER, start_simulator
from agentbench.traces.model import Session
from agentbench.traces.stats import potential_cached_tokens
from agentbench.traces.words import block_text


def _content(turn: Any, salt: int, memo: dict[tuple[int, int], str]) -> str:
    budget = max(0, turn.input_tokens - 3)  # chat template: 2 per message + 1 primer
    parts = []
    for h in turn.hash_ids.tolist():
        k = min(turn.block_size, budget)
        if k <= 0:
            break
        if (h, k) not in memo:
            memo[(h, k)] = block_text(salt, h, k)
        parts.append(memo[(h, k)])
        budget -= k
    if budget > 0:
        parts.append(block_text(salt ^ 0x5EED, turn.turn, budget))
    return "".join(parts)


async def _replay(cfg: SimulatedEndpoint, sessions: list[Session],
                  turns: int) -> dict[str, float]:
    handle = await start_simulator(cfg, in_process=True)
    handle.cluster.finished_log = log = []
    pot = potential_cached_tokens(sessions)
    totals = {"prompt": 0, "cached": 0, "potential": 0}
    try:
        async with aiohttp.ClientSession(base_url=handle.url) as http:
            async def agent(idx: int, s: Session) -> None:
                memo: dict[tuple[int, int], str] = {}
                for turn in s.turns[:turns]:
                    body = {"model": "sim", "max_tokens": 8, "ignore_eos": True,
                            "stream": True, "stream_options": {"include_usage": True},
                            "messages": [{"role": "user",
                                          "content": _content(turn, 100 + idx, memo)}]}
                    usage = None
                    async with http.post("/v1/chat/completions", json=body,
                                         headers={SESSION_HEADER: s.session_id}) as r:
                        assert r.status == 200
                        async for raw in r.content:
                            if b'"usage"' in raw:
                                usage = json.loads(raw[6:])["usage"]
                    assert usage is not None
                    assert usage["prompt_tokens"] == turn.input_tokens
                    totals["prompt"] += usage["prompt_tokens"]
                    totals["cached"] += usage["prompt_tokens_details"]["cached_tokens"]
                    totals["potential"] += pot[(s.session_id, turn.turn)]

            await asyncio.wait_for(asyncio.gather(*(agent(i, s)
                                                    for i, s in enumerate(sessions))), 240)
    finally:
        await handle.close()
    ttft = [r.first_token_at - r.arrival for r in log]  # type: ignore[operator]
    return {"hit": totals["cached"] / totals["prompt"],
            "potential": totals["potential"] / totals["prompt"],
            "ttft_p50": statistics.median(ttft), "requests": len(log)}


def _sessions(weka_dir: Path, n: int, max_input: int) -> list[Session]:
    from agentbench.traces.readers import read_trace

    trace = read_trace(str(weka_dir), format="weka")
    roots = [s for s in trace.sessions if s.parent_id is None and len(s.turns) >= 12
             and max(t.input_tokens for t in s.turns) <= max_input]
    roots.sort(key=lambda s: s.session_id)
    assert len(roots) >= n
    return roots[:n]


@pytest.mark.timeout(300)
async def test_shared_tier_and_affinity_recover_the_potential(weka_dir: Path) -> None:
    sessions = _sessions(weka_dir, 4, 110_000)
    base = {"kind": "simulated", "preset": "h200-llama3-70b", "instances": 4,
            "speedup": 200, "cache_blocks": 8000}  # 128K tokens per instance
    rr = await _replay(SimulatedEndpoint.model_validate({**base, "router": "round_robin"}),
                       sessions, 12)
    shared = await _replay(SimulatedEndpoint.model_validate(
        {**base, "router": "round_robin", "shared_tier": {"capacity_blocks": 1_000_000}}),
        sessions, 12)
    sticky = await _replay(SimulatedEndpoint.model_validate(
        {**base, "router": "session_affinity"}), sessions, 12)
    potential = rr["potential"]
    print(f"\nwhat-if: potential {potential:.1%}; round robin {rr['hit']:.1%} p50 TTFT "
          f"{rr['ttft_p50']:.2f} s; shared tier {shared['hit']:.1%} "
          f"{shared['ttft_p50']:.2f} s; affinity {sticky['hit']:.1%} "
          f"{sticky['ttft_p50']:.2f} s (simulated)")
    assert rr["requests"] == shared["requests"] == sticky["requests"] == 48
    assert shared["hit"] <= potential and sticky["hit"] <= potential
    assert shared["hit"] >= 0.95 * potential  # write-through tier: every prefix found
    assert sticky["hit"] >= 0.9 * potential
    assert rr["hit"] <= 0.7 * potential  # each instance sees every session: thrash
    assert rr["ttft_p50"] >= 3 * shared["ttft_p50"]
    assert rr["ttft_p50"] >= 3 * sticky["ttft_p50"]
