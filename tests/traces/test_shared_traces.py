"""The facts of ../shared/README.md, reproduced from the real traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbench.traces.readers import read_trace
from agentbench.traces.stats import potential_cached_tokens, trace_stats


def _hit(sessions) -> float:  # type: ignore[no-untyped-def]
    pot = potential_cached_tokens(sessions)
    return sum(pot.values()) / sum(t.input_tokens for s in sessions for t in s.turns)


def test_weka_top_level_facts(weka_trace) -> None:  # type: ignore[no-untyped-def]
    roots = weka_trace.roots()
    assert len(roots) == 40
    assert sum(len(s.turns) for s in roots) == 2467
    assert len({s.scope for s in weka_trace.sessions}) == 40  # one hash scope per trace
    # potential hit of the top-level requests alone (per-trace scope): 95.6% +- 0.1
    assert _hit(roots) == pytest.approx(0.956, abs=0.001)
    with_subs = {s.parent_id for s in weka_trace.sessions if s.parent_id is not None}
    assert len(with_subs) == 9


def test_weka_all_requests_facts(weka_trace) -> None:  # type: ignore[no-untyped-def]
    st = trace_stats(weka_trace)
    assert st.requests == 2790
    assert st.potential_hit_rate == pytest.approx(0.951, abs=0.001)
    assert st.roots == 40 and st.spawns == len(weka_trace.sessions) - 40


def test_every_subagent_marker_is_a_spawn_tied_to_the_right_parent_turns(
        weka_dir: Path, weka_trace) -> None:  # type: ignore[no-untyped-def]
    """Checked against the raw JSON: parent_turn = the last parent request before the
    marker, join_turn = the next parent request after it (None when none follows or the
    marker was launched async), and the child's turns are the marker's requests."""
    by_id = weka_trace.by_id()
    markers = 0
    for f in sorted(weka_dir.glob("*.json")):
        doc = json.loads(f.read_text())
        stack = [(str(doc.get("id") or f.stem), doc["requests"])]
        while stack:
            sid, reqs = stack.pop()
            seen_requests = 0
            for i, r in enumerate(reqs):
                if r.get("type") != "subagent":
                    seen_requests += 1
                    continue
                markers += 1
                child = by_id[f"{sid}/{r['agent_id']}"]
                assert child.relation == "spawn" and child.parent_id == sid
                assert child.parent_turn == (seen_requests - 1 if seen_requests else None)
                follows = any(x.get("type") != "subagent" for x in reqs[i + 1:])
                if r.get("status") == "async_launched" or not follows:
                    assert child.join_turn is None
                else:
                    assert child.join_turn == seen_requests
                inner = [x for x in r["requests"] if x.get("type") != "subagent"]
                assert [t.input_tokens for t in child.turns] == [x["in"] for x in inner]
                assert [t.hash_ids.tolist() for t in child.turns] == [x["hash_ids"]
                                                                     for x in inner]
                # the child starts at t - duration_ms on the parent's clock (t is its end)
                parent = by_id[sid]
                assert child.start_s == pytest.approx(
                    parent.start_s + r["t"] - r["duration_ms"] / 1000)
                stack.append((child.session_id, r["requests"]))
    spawns = [s for s in weka_trace.sessions if s.relation == "spawn"]
    assert markers == len(spawns) > 0


def test_subagents_start_after_the_parent_request_that_launched_them(
        weka_dir: Path, weka_trace) -> None:  # type: ignore[no-untyped-def]
    """A marker's t is the subagent's end: for every marker with parent requests on both
    sides, the start read (t - duration_ms) falls just after the previous parent request
    ended (0.09-1.0 s in these traces) and before the next one starts; the subagent's own
    requests start at or after it and end before t; markers launched together (no parent
    request between them) share one start."""
    by_id = weka_trace.by_id()
    gaps: list[float] = []
    for f in sorted(weka_dir.glob("*.json")):
        doc = json.loads(f.read_text())
        sid = str(doc.get("id") or f.stem)
        parent = by_id[sid]
        reqs = doc["requests"]
        launched: dict[int, list[float]] = {}  # previous parent request -> starts
        for i, r in enumerate(reqs):
            if r.get("type") != "subagent":
                continue
            child = by_id[f"{sid}/{r['agent_id']}"]
            start = child.start_s - parent.start_s  # on the parent's clock
            assert start == pytest.approx(r["t"] - r["duration_ms"] / 1000)
            assert child.turns[0].t >= 0
            assert start + max(t.t + (t.api_s or 0) for t in child.turns) <= r["t"]
            before = [k for k in range(i) if reqs[k].get("type") != "subagent"]
            after = [k for k in range(i + 1, len(reqs)) if reqs[k].get("type") != "subagent"]
            if before:
                launched.setdefault(before[-1], []).append(start)
            if not (before and after):
                continue
            prev, nxt = reqs[before[-1]], reqs[after[0]]
            prev_end = prev["t"] + prev["api_time"]
            assert prev_end < start < nxt["t"]
            gaps.append(start - prev_end)
        for starts in launched.values():
            assert max(starts) - min(starts) < 0.05
    assert len(gaps) == 26
    assert min(gaps) > 0.05 and max(gaps) < 1.1


def test_mooncake_conversation_trace(mooncake_dir: Path) -> None:
    st = trace_stats(read_trace(mooncake_dir / "conversation_trace.jsonl"))
    assert st.requests == 12031
    assert st.scopes == 1
    assert st.potential_hit_rate == pytest.approx(0.374, abs=0.001)


def test_mooncake_synthetic_trace(mooncake_dir: Path) -> None:
    st = trace_stats(read_trace(mooncake_dir / "synthetic_trace.jsonl"))
    assert st.requests == 3993
    assert st.potential_hit_rate == pytest.approx(0.651, abs=0.001)
