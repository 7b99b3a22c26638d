"""Mooncake reader: one-request sessions, session_id grouping, delays, bad input, speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import detect_format, read_trace
from agentbench.traces.stats import potential_cached_tokens, trace_stats


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_each_request_is_a_one_turn_root_session(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 1000, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 3500, "input_length": 1500, "output_length": 20, "hash_ids": [0, 1, 2]},
    ])
    assert detect_format(f) == "mooncake"
    tr = read_trace(f)
    assert [s.relation for s in tr.sessions] == ["root", "root"]
    a, b = tr.sessions
    # start_s: ms from the file's first timestamp, in seconds
    assert (a.start_s, b.start_s) == (0.0, 2.5)
    assert b.turns[0].hash_ids.tolist() == [0, 1, 2] and b.turns[0].block_size == 512
    assert (b.turns[0].input_tokens, b.turns[0].output_tokens) == (1500, 20)
    # potential: the second request's leading blocks 0, 1 were sent: 2 x 512 = 1024 tokens
    assert potential_cached_tokens(tr.sessions)[(b.session_id, 0)] == 1024
    assert trace_stats(tr).potential_hit_rate == pytest.approx(1024 / 2524)


def test_one_hash_scope_per_file(tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_jsonl(tmp_path / f"{name}.jsonl", [
            {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [7]}])
    tr = read_trace(tmp_path, format="mooncake")
    assert len({s.scope for s in tr.sessions}) == 2
    # equal ids in different files are not the same blocks
    assert sum(potential_cached_tokens(tr.sessions).values()) == 0


def test_session_id_groups_turns_in_timestamp_order(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "s.jsonl", [
        {"session_id": "x", "timestamp": 5000, "input_length": 600, "output_length": 5,
         "hash_ids": [1, 2]},
        {"session_id": "x", "timestamp": 1000, "input_length": 300, "output_length": 5,
         "hash_ids": [1]},
        {"session_id": "y", "timestamp": 2000, "input_length": 10, "output_length": 5,
         "hash_ids": [9]},
        {"session_id": "x", "delay": 1500, "input_length": 1100, "output_length": 5,
         "hash_ids": [1, 2, 3]},
        {"timestamp": 2500, "input_length": 10, "output_length": 1, "hash_ids": [4]},
    ])
    tr = read_trace(f)
    by = tr.by_id()
    x = by["x"]
    # the delay-only row starts 1.5 s after its predecessor in the file (the 1000 ms row),
    # so it sorts before the 5000 ms row
    assert [t.input_tokens for t in x.turns] == [300, 1100, 600]
    # t from the session start; think: the delay (ms) when given, else the start gap
    assert [t.t for t in x.turns] == [0.0, 1.5, 4.0]
    assert [t.think_s for t in x.turns] == [0.0, 1.5, 2.5]
    assert x.start_s == 0.0 and by["y"].start_s == 1.0
    assert len(tr.sessions) == 3 and all(s.relation == "root" for s in tr.sessions)


@pytest.mark.parametrize("line, where, field", [
    ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1', "line 2", None),
    ('{"timestamp": 0, "output_length": 1, "hash_ids": [1]}', "line 2", "input_length"),
    ('{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": []}', "line 2",
     "input_length"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]}', "line 2",
     "hash_ids"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}', "line 2",
     "hash_ids"),
    ('{"timestamp": "soon", "input_length": 10, "output_length": 1, "hash_ids": [1]}',
     "line 2", "timestamp"),
    ('[1, 2]', "line 2", None),
    ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [18446744073709551616]}',
     "line 2", "hash_ids"),
])
def test_bad_lines_name_file_line_and_field(tmp_path: Path, line: str, where: str,
                                            field: str | None) -> None:
    good = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'
    f = tmp_path / "bad.jsonl"
    f.write_text(good + "\n" + line + "\n")
    with pytest.raises(InputError) as e:
        read_trace(f, format="mooncake")
    assert e.value.source == str(f)
    assert e.value.where == where
    assert e.value.field == field
    assert str(f) in str(e.value) and where in str(e.value)


def test_unknown_reader_option_is_an_input_error(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}])
    with pytest.raises(InputError, match="unknown option 'tokeniser'") as e:
        read_trace(f, tokeniser="x")
    assert e.value.field == "tokeniser"


def test_a_session_id_in_two_files_is_an_input_error(tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_jsonl(tmp_path / f"{name}.jsonl", [
            {"session_id": "s", "timestamp": 0, "input_length": 5, "output_length": 1,
             "hash_ids": [1]}])
    with pytest.raises(InputError, match="used again") as e:
        read_trace(tmp_path, format="mooncake")
    assert e.value.field == "session_id" and e.value.source == str(tmp_path / "b.jsonl")


@pytest.mark.parametrize("rows", [
    [{"timestamp": 0}, {"timestamp": 1e13}],  # 1e10 s later: past int64 nanoseconds
    [{"timestamp": 0, "session_id": "a"}, {"delay": 1e13, "session_id": "a"}],
])
def test_a_timestamp_too_far_from_the_first_is_one_error_naming_its_line(
        tmp_path: Path, rows: list[dict]) -> None:
    """A garbled timestamp (1e13 ms) once overflowed the run's nanoseconds mid-replay (nine
    tracebacks); it is refused with the trace, as every other reader's times are."""
    body = {"input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    f = write_jsonl(tmp_path / "far.jsonl", [{**r, **body} for r in rows])
    with pytest.raises(InputError, match=r"line 2.*timestamp.*over the 1e\+09 s"):
        read_trace(f)
    ok = write_jsonl(tmp_path / "near.jsonl", [{"timestamp": 0, **body},
                                               {"timestamp": 9.99e11, **body}])
    assert read_trace(ok).sessions[1].start_s == pytest.approx(9.99e8)


@pytest.mark.parametrize("block_size", [0, -512, (1 << 20) + 1, 2**70, 1.5, True, "512"])
def test_a_block_size_option_out_of_bounds_is_one_error(tmp_path: Path,
                                                         block_size: object) -> None:
    """The reader option's bound is a simulated endpoint's (2**70 made every prompt one
    block, accepted)."""
    f = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}])
    with pytest.raises(InputError, match="from 1 to 1,048,576") as e:
        read_trace(f, block_size=block_size)
    assert e.value.field == "block_size"
    assert read_trace(f, block_size=1 << 20).sessions[0].turns[0].block_size == 1 << 20


@pytest.mark.parametrize("sid", [[1], {"a": 1}, 1.5, True])
def test_a_session_id_that_is_no_string_or_integer_is_one_error(tmp_path: Path,
                                                                 sid: object) -> None:
    """A list (unhashable) as ``session_id`` was a TypeError traceback from the grouping."""
    f = write_jsonl(tmp_path / "t.jsonl", [
        {"session_id": sid, "timestamp": 0, "input_length": 5, "output_length": 1,
         "hash_ids": [1]}])
    with pytest.raises(InputError, match="expected a string or an integer") as e:
        read_trace(f, format="mooncake")
    assert e.value.field == "session_id" and e.value.where == "line 1"
