"""The trace model's checks, the native round trip, and potential hit arithmetic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench.errors import InputError
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.readers import native
from agentbench.traces.stats import (
    Potential,
    leading_seen_blocks,
    potential_cached_tokens,
    trace_stats,
)


def turn(i: int, ids: list[int], inp: int, out: int = 10, t: float = 0.0, bs: int = 4) -> Turn:
    return Turn(turn=i, t=t, think_s=1.0, api_s=0.5, input_tokens=inp, output_tokens=out,
                hash_ids=np.array(ids, dtype=np.int64), block_size=bs)


def session(sid: str, turns: list[Turn], parent: str | None = None, relation: str = "root",
            pt: int | None = None, jt: int | None = None, start: float = 0.0,
            scope: str = "s") -> Session:
    return Session(session_id=sid, parent_id=parent, relation=relation,  # type: ignore[arg-type]
                   parent_turn=pt, join_turn=jt, model="m", source="test", scope=scope,
                   start_s=start, turns=turns)


def test_leading_seen_blocks_counts_only_leading_runs_from_earlier_turns() -> None:
    runs = leading_seen_blocks([
        np.array([1, 2, 3]),      # nothing seen before: 0
        np.array([1, 2, 3, 4]),   # 1,2,3 seen: 3
        np.array([1, 9, 3, 4]),   # 1 seen, 9 new -> stops: 1 (3,4 after the break do not count)
        np.array([5, 5]),         # 5 new (repeats inside one turn do not count): 0
        np.array([], dtype=np.int64),
        np.array([1, 2, 3, 4, 9, 5]),  # all seen earlier: 6
    ])
    assert runs.tolist() == [0, 3, 1, 0, 0, 6]


def _seen_runs(turns: list[list[int]]) -> list[int]:
    """leading_seen_blocks by its definition: a block at a time, against every block an
    earlier turn sent."""
    seen: set[int] = set()
    out = []
    for ids in turns:
        run = 0
        while run < len(ids) and ids[run] in seen:
            run += 1
        out.append(run)
        seen.update(ids)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 90), st.integers(0, 3),
                          st.integers(-2, 12)), min_size=1, max_size=12),
       st.integers(0, 2**16))
def test_leading_seen_blocks_is_its_definition_whatever_turn_it_is_told_to_compare(
        shape: list[tuple[int, int, int, int]], seed: int) -> None:
    """Turns that grow, share a first block (siblings), fork from each other or get
    compacted, long enough for the vectorised comparison; ``previous`` hints that are
    right, wrong, later than the turn or missing leave the runs as defined."""
    import random

    rng = random.Random(seed)
    turns: list[list[int]] = []
    for base, extra, kind, _hint in shape:
        if kind == 0 or not turns:  # a new session: a shared first block, its own rest
            ids = [base] + [rng.randrange(10**6) for _ in range(extra)]
        elif kind == 1:  # grows an earlier turn
            ids = rng.choice(turns) + [rng.randrange(10**6) for _ in range(extra)]
        elif kind == 2:  # forks: a cut of an earlier turn, then its own
            t = rng.choice(turns)
            ids = t[:rng.randrange(len(t) + 1)] + [rng.randrange(100) for _ in range(extra)]
        else:  # compacted: the first block, then blocks of earlier turns shuffled
            pool = [x for t in turns for x in t]
            ids = [base] + rng.sample(pool, min(len(pool), extra))
        turns.append(ids)
    previous = [h if h < 0 else h % (len(turns) + 2) for *_, h in shape]
    arrays = [np.array(t, dtype=np.int64) for t in turns]
    assert leading_seen_blocks(arrays, previous).tolist() == _seen_runs(turns)
    assert leading_seen_blocks(arrays).tolist() == _seen_runs(turns)


def test_potential_tokens_cap_at_input_and_respect_scopes() -> None:
    # block size 4. a/1 re-sends a/0's two blocks: 2 * 4 = 8 tokens. b shares ids with a but
    # lives in another hash scope: 0. c re-sends blocks 1,2,3, its whole prompt:
    # min(3 * 4, 11) = 11 (the last block is partial).
    a = session("a", [turn(0, [1, 2], 8, t=0), turn(1, [1, 2, 3], 10, t=5)])
    b = session("b", [turn(0, [1, 2], 6, t=1)], scope="other")  # same ids, other scope
    c = session("c", [turn(0, [1, 2, 3], 11, t=9)])  # whole prompt seen: min(3*4, 11) = 11
    pot = potential_cached_tokens([a, b, c])
    assert pot == {("a", 0): 0, ("a", 1): 8, ("b", 0): 0, ("c", 0): 11}
    st = trace_stats(Trace([a, b, c]))
    # (0 + 8 + 0 + 11) / (8 + 10 + 6 + 11) = 19 / 35
    assert st.potential_hit_rate == pytest.approx(19 / 35)
    assert st.scopes == 2


def test_send_order_follows_recorded_time_not_file_order() -> None:
    late = session("late", [turn(0, [1, 2], 8, t=0)], start=100.0)
    early = session("early", [turn(0, [1, 2], 8, t=0)], start=0.0)
    pot = potential_cached_tokens([late, early])
    assert pot[("early", 0)] == 0 and pot[("late", 0)] == 8


def test_potential_a_scope_at_a_time_gives_the_whole_traces_figures() -> None:
    a = session("a", [turn(0, [1, 2], 8, t=0), turn(1, [1, 2, 3], 10, t=5)])
    b = session("b", [turn(0, [1, 2], 6, t=1)], scope="other")
    c = session("c", [turn(0, [1, 2, 3], 11, t=9)])
    late = session("late", [turn(0, [7, 8], 8, t=0)], start=100.0, scope="t")
    early = session("early", [turn(0, [7, 8], 8, t=0)], start=0.0, scope="t")
    sessions = [a, b, c, late, early]
    whole = potential_cached_tokens(sessions)
    lazy = Potential(sessions)
    # asked in another order than the trace's, one scope after another
    for key in [("late", 0), ("c", 0), ("b", 0), ("a", 1), ("early", 0), ("a", 0)]:
        assert lazy.get(key) == whole[key]
    assert whole[("late", 0)] == 8 and whole[("c", 0)] == 11
    assert lazy.get(("a", 7), -1) == -1 and lazy.get(("nobody", 0)) == 0


def test_potential_a_scope_at_a_time_on_synthesized_and_recorded_traces() -> None:
    from agentbench.traces.readers import read_trace
    from agentbench.traces.synth import synthesize

    for tr in (read_trace("builtin:claude-code-weka"), synthesize("agentx", sessions=6, seed=3),
               synthesize("codex", sessions=8, seed=1)):
        whole = potential_cached_tokens(tr.sessions)
        lazy = Potential(tr.sessions)
        keys = sorted(whole, reverse=True)
        assert [lazy.get(k) for k in keys] == [whole[k] for k in keys]
        assert sum(whole.values()) > 0


def test_validate_names_session_turn_and_field() -> None:
    bad = session("x", [turn(0, [1, 2, 3], 8)])  # 3 ids, 8 tokens / 4 = 2 blocks allowed
    with pytest.raises(InputError) as ei:
        Trace([bad]).validate()
    assert "session x turn 0" in str(ei.value) and "hash_ids" in str(ei.value)


def test_validate_checks_parent_links() -> None:
    root = session("r", [turn(0, [1], 4), turn(1, [1, 2], 8)])
    child = session("c", [turn(0, [7], 4)], parent="r", relation="spawn", pt=1, jt=1)
    with pytest.raises(InputError, match="join_turn"):
        Trace([root, child]).validate()
    orphan = session("o", [turn(0, [7], 4)], parent="nobody", relation="fork", pt=0)
    with pytest.raises(InputError, match="not in trace"):
        Trace([root, orphan]).validate()


def test_trees_group_descendants_under_their_root() -> None:
    r1 = session("r1", [turn(0, [1], 4), turn(1, [1, 2], 8)])
    c1 = session("c1", [turn(0, [5], 4)], parent="r1", relation="spawn", pt=0, jt=1)
    g1 = session("g1", [turn(0, [6], 4)], parent="c1", relation="fork", pt=0)
    r2 = session("r2", [turn(0, [9], 4)])
    trees = Trace([r1, c1, r2, g1]).trees()
    assert [[s.session_id for s in t] for t in trees] == [["r1", "c1", "g1"], ["r2"]]


def test_native_round_trip_is_lossless(tmp_path: Path) -> None:
    r1 = session("r1", [turn(0, [1, 2], 8), turn(1, [1, 2, 3], 10, t=4.25)])
    r1.turns[1].cached_tokens = 8
    r1.turns[1].api_s = None
    c1 = session("r1/a", [turn(0, [5], 4)], parent="r1", relation="spawn", pt=0, jt=None,
                 start=1.5)
    empty = session("e", [])
    tr = Trace([r1, c1, empty], name="demo")
    path = native.write(tr, tmp_path / "t.parquet")
    back = native.read(path)
    assert back == tr
    assert back.name == "demo"
    assert back.sessions[0].turns[1].api_s is None
    assert back.sessions[1].join_turn is None


def test_a_native_file_read_for_some_roots_holds_their_whole_trees(tmp_path: Path) -> None:
    """``sessions`` (the roots a filter keeps): their trees only, grandchildren and a child
    written before its parent included; a name that is no root of the file reads it all
    (the filter then says what is missing); a turn of a session the file does not list is
    still an error."""
    from agentbench.traces.load import apply_filters
    from agentbench.traces.readers import read_trace

    r1 = session("r1", [turn(0, [1, 2], 8), turn(1, [1, 2, 3], 10, t=4.0)])
    kid = session("r1/a", [turn(0, [5], 4)], parent="r1", relation="spawn", pt=0, start=1.0)
    grand = session("r1/a/b", [turn(0, [6], 4)], parent="r1/a", relation="spawn", pt=0,
                    start=1.5)
    r2 = session("r2", [turn(0, [9, 9], 8)], scope="s2")
    tr = Trace([r1, grand, kid, r2], name="demo")  # the grandchild before its parent
    path = native.write(tr, tmp_path / "t.parquet")
    part = native.read(path, sessions=["r1"])
    assert [s.session_id for s in part.sessions] == ["r1", "r1/a/b", "r1/a"]
    assert part.sessions == [r1, grand, kid]
    assert [s.session_id for s in native.read(path, sessions=["r2"]).sessions] == ["r2"]
    assert native.read(path, sessions=["r1", "r1/a"]) == tr  # r1/a is no root: all of it
    filters = type("F", (), {"sessions": ["r1"], "min_turns": None, "max_input_tokens": None,
                             "max_context_tokens": None, "with_subagents": None,
                             "shuffle": False, "max_sessions": None})()
    assert apply_filters(read_trace(path, sessions=["r1"]), filters, 0).sessions == \
        apply_filters(native.read(path), filters, 0).sessions
    with pytest.raises(InputError, match="not root sessions"):
        apply_filters(read_trace(path, sessions=["r1", "r9"]), type(
            "G", (), {**filters.__class__.__dict__, "sessions": ["r1", "r9"]})(), 0)
    # r2's turns in a file whose sessions table lacks r2
    import pyarrow.parquet as pq

    lacking = native.write(Trace([r1, grand, kid]), tmp_path / "l.parquet")
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata(pq.read_schema(lacking).metadata),
                   tmp_path / "bad.parquet")
    for roots in (None, ["r1"]):
        with pytest.raises(InputError, match="turn of unknown session 'r2'"):
            native.read(tmp_path / "bad.parquet", sessions=roots)


def test_native_round_trip_of_the_weka_traces(weka_trace: Trace, tmp_path: Path) -> None:
    path = native.write(weka_trace, tmp_path / "w.parquet")
    back = native.read(path)
    assert back == weka_trace
    assert trace_stats(back).to_dict() | {"name": ""} == trace_stats(weka_trace).to_dict() | {
        "name": ""}


def test_a_plain_parquet_file_is_not_a_native_trace(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1]}), p)
    with pytest.raises(InputError, match="not an agentbench native trace"):
        native.read(p)


@pytest.mark.parametrize("field", ["t", "think_s", "api_s", "start_s"])
@pytest.mark.parametrize("value", [1e300, 2e9, float("nan"), -1.0])
def test_a_recorded_time_out_of_range_names_its_field(field: str, value: float) -> None:
    turn = Turn(0, 0.0, 0.0, 1.0, 64, 4, np.arange(1, dtype=np.int64), 64)
    sess = Session("s", None, "root", None, None, None, "src", "s", 0.0, [turn])
    if field == "start_s":
        sess.start_s = value
    else:
        setattr(turn, field, value)
    with pytest.raises(InputError) as e:
        Trace([sess]).validate()
    assert e.value.field == field and "\n" not in str(e.value)
    turn.t = turn.think_s = turn.api_s = sess.start_s = 1e9  # the longest allowed (32 years)
    Trace([sess]).validate()


FORGED = "x\x1b]0;retitled\x07\nerror: a forged line\u2028"


def test_text_from_a_trace_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    good = tmp_path / "good.parquet"
    native.write(Trace([session(FORGED, [turn(0, [1], 4)])], name=FORGED), good)
    bad = tmp_path / "bad.parquet"  # the same, with a time no turn may have
    bad_turn = turn(0, [1], 4)
    object.__setattr__(bad_turn, "api_s", -1.0)
    native.write(Trace([session(FORGED, [bad_turn])], name=FORGED), bad)
    for path, code in ((good, 0), (bad, 2)):
        res = CliRunner().invoke(app, ["traces", "stats", str(path)])
        # the name and the session id went out as they came: an escape sequence that
        # retitles the terminal, and a line break that forges a line of the output
        assert res.exit_code == code, res.output
        assert "\x1b" not in res.output and "\x07" not in res.output, res.output
        assert not any(ln.startswith("error: a forged") for ln in res.output.splitlines())
        assert "x\\x1b]0;retitled\\x07\\nerror: a forged line\\u2028" in res.output
