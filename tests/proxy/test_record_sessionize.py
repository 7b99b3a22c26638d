"""Sessions and subagents from recorded calls (``agentbench.proxy.sessionize``), on
hand-built calls: times in ms, prompts as message digest chains (small ints)."""

from __future__ import annotations

import pytest

from agentbench.proxy.calls import Call
from agentbench.proxy.sessionize import sessionize
from agentbench.replay.treespec import join_pause_s

MS = 1_000_000


def call(i: int, start_ms: int, end_ms: int, prefixes: list[int], reply: int, *,
         key: str | None = None, parent: str | None = None, status: int = 200) -> Call:
    return Call(index=i, path="/v1/chat/completions", model="m", stream=True, status=status,
                arrival_ns=start_ms * MS, first_byte_ns=start_ms * MS + MS,
                end_ns=end_ms * MS, input_tokens=100, output_tokens=10, cached_tokens=None,
                usage_reported=True, counted_input_tokens=100, hash_ids=[i, 1], block_size=64,
                prefixes=prefixes, reply=reply, session_key=key, parent_key=parent)


def shape(calls: list[Call], **kw: str) -> list[tuple[str, str | None, int | None,
                                                     int | None, list[int]]]:
    """(relation, parent index, parent_turn, join_turn, call indices) per session."""
    trace, rows = sessionize(calls, **kw)
    it = iter(rows)
    idx = {s.session_id: n for n, s in enumerate(trace.sessions)}
    return [(s.relation, None if s.parent_id is None else str(idx[s.parent_id]),
             s.parent_turn, s.join_turn, [next(it).index for _ in s.turns])
            for s in trace.sessions]


def test_prompt_plus_response_continues_a_session() -> None:
    calls = [call(0, 0, 10, [1, 2], 10), call(1, 20, 30, [1, 2, 10, 11], 20),
             call(2, 40, 50, [1, 2, 10, 11, 20, 21], 30)]
    assert shape(calls) == [("root", None, None, None, [0, 1, 2])]


def test_edited_reply_continues_by_prompt_prefix() -> None:
    # the agent dropped its reasoning from the reply: 99 is not the recorded reply 10
    calls = [call(0, 0, 10, [1, 2], 10), call(1, 20, 30, [1, 2, 99, 11], 20)]
    assert shape(calls) == [("root", None, None, None, [0, 1])]


def test_identical_first_prompts_are_separate_sessions() -> None:
    calls = [call(0, 0, 10, [1, 2], 10), call(1, 1, 11, [1, 2], 50),
             call(2, 20, 30, [1, 2, 50, 3], 60), call(3, 21, 31, [1, 2, 10, 3], 70)]
    assert shape(calls, subagents="off") == [("root", None, None, None, [0, 3]),
                                             ("root", None, None, None, [1, 2])]


def test_branch_from_an_earlier_turn_is_a_fork() -> None:
    calls = [call(0, 0, 10, [1, 2], 10), call(1, 20, 30, [1, 2, 10, 11], 20),
             call(2, 35, 40, [1, 2, 10, 12], 30), call(3, 50, 60, [1, 2, 10, 11, 20, 5], 40)]
    assert shape(calls) == [("root", None, None, None, [0, 1, 3]),
                            ("fork", "0", 0, 2, [2])]


def test_fork_keeps_its_delay_after_the_sibling_continuation() -> None:
    # the fork (call 2) branched from turn 0 after the continuation (call 1) was sent: its
    # first think time counts from turn 0's end, so replay sends it after its sibling too,
    # and the parent's join turn keeps the 10 ms it waited after the fork ended
    calls = [call(0, 0, 10, [1, 2], 10), call(1, 20, 30, [1, 2, 10, 11], 20),
             call(2, 35, 40, [1, 2, 10, 12], 30), call(3, 50, 60, [1, 2, 10, 11, 20, 5], 40)]
    trace, _ = sessionize(calls)
    root, fork = trace.sessions
    assert [t.think_s for t in root.turns] == [0.0, 0.010, 0.020]
    assert fork.turns[0].think_s == 0.025 > root.turns[1].think_s
    assert join_pause_s(root, fork) == pytest.approx(0.010)


def test_spawn_first_think_counts_from_its_parent_turn() -> None:
    calls = [call(0, 0, 10, [1], 10), call(1, 20, 30, [1, 10, 2], 20),
             call(2, 35, 40, [7], 70), call(3, 60, 70, [1, 10, 2, 20, 3], 30)]
    trace, _ = sessionize(calls)
    assert trace.sessions[1].parent_turn == 1
    assert trace.sessions[1].turns[0].think_s == 0.005  # 35 - 30 ms


def test_grandchild_started_before_any_turn_of_its_parent_ended() -> None:
    # c is b's child from b's start (parent_turn None): replay starts it where b starts,
    # at the end of a's turn 0, so its think time counts from there, as b's does
    calls = [call(0, 0, 10, [1], 10, key="a"), call(1, 15, 40, [2], 20, key="b", parent="a"),
             call(2, 20, 25, [3], 30, key="c", parent="b"), call(3, 50, 60, [1], 40, key="a")]
    trace, _ = sessionize(calls)
    a, b, c = trace.sessions
    assert (b.parent_turn, c.parent_turn) == (0, None)
    assert (b.turns[0].think_s, c.turns[0].think_s) == (0.005, 0.010)


def test_subagent_between_parent_calls_joins_when_parent_resumes() -> None:
    calls = [call(0, 0, 10, [1], 10), call(1, 20, 30, [1, 10, 2], 20),
             call(2, 35, 40, [7], 70), call(3, 45, 50, [7, 70, 8], 80),  # subagent
             call(4, 60, 70, [1, 10, 2, 20, 3], 30)]
    assert shape(calls) == [("root", None, None, None, [0, 1, 4]),
                            ("spawn", "0", 1, 2, [2, 3])]


def test_subagent_outliving_its_parent_runs_in_background() -> None:
    calls = [call(0, 0, 10, [1], 10), call(1, 20, 30, [1, 10, 2], 20),
             call(2, 32, 90, [7], 70), call(3, 40, 50, [1, 10, 2, 20, 3], 30)]
    assert shape(calls) == [("root", None, None, None, [0, 1, 3]),
                            ("spawn", "0", 1, None, [2])]


def test_nested_subagent_takes_the_most_recent_parent() -> None:
    calls = [call(0, 0, 10, [1], 10), call(1, 12, 14, [2], 20),  # child of 0
             call(2, 16, 18, [3], 30),  # grandchild: 1 answered last
             call(3, 20, 22, [2, 20, 4], 21), call(4, 30, 40, [1, 10, 5], 11)]
    assert shape(calls) == [("root", None, None, None, [0, 4]),
                            ("spawn", "0", 0, 1, [1, 3]),
                            ("spawn", "1", 0, 1, [2])]


def test_subagents_off_keeps_every_session_a_root() -> None:
    calls = [call(0, 0, 10, [1], 10), call(1, 12, 14, [2], 20),
             call(2, 30, 40, [1, 10, 5], 11)]
    assert [s[0] for s in shape(calls, subagents="off")] == ["root", "root"]
    with pytest.raises(ValueError):
        sessionize(calls, subagents="maybe")


def test_session_keys_and_parent_header() -> None:
    calls = [call(0, 0, 10, [1], 10, key="a"), call(1, 12, 20, [2], 20, key="b", parent="a"),
             call(2, 25, 30, [9], 30, key="a"), call(3, 31, 33, [8], 40, key="b"),
             call(4, 35, 40, [1], 50, key="a")]
    trace, _ = sessionize(calls)
    a, b = trace.sessions
    assert (a.session_id, b.session_id, b.parent_id) == ("a", "b", "a")
    assert (b.relation, b.parent_turn, b.join_turn) == ("spawn", 0, 2)
    assert [len(s.turns) for s in trace.sessions] == [3, 2]


def test_times_and_failed_calls() -> None:
    calls = [call(0, 100, 110, [1], 10), call(1, 111, 113, [1, 10, 2], 20, status=500),
             call(2, 150, 170, [1, 10, 2], 20)]
    trace, rows = sessionize(calls)
    (s,) = trace.sessions
    assert [r.index for r in rows] == [0, 2]  # the failed call is left out
    assert s.start_s == 0 and [t.t for t in s.turns] == [0, 0.05]
    assert [t.think_s for t in s.turns] == [0, 0.04]  # 150 - 110 ms
    assert [t.api_s for t in s.turns] == [0.01, 0.02]
