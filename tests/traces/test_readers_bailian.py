"""Bailian reader: parent_chat_id chains become sessions, extra children become forks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import detect_format, read_trace
from agentbench.traces.stats import potential_cached_tokens


def row(chat_id: int, parent: int, ts: float, n_blocks: int, ids: list[int],
        out: int = 5, turn: int = 1) -> dict:
    return {"chat_id": chat_id, "parent_chat_id": parent, "timestamp": ts,
            "input_length": n_blocks * 16, "output_length": out, "type": "text",
            "turn": turn, "hash_ids": ids}


ROWS = [
    row(1, -1, 10.0, 3, [1, 2, 3]),
    row(2, 1, 12.5, 4, [1, 2, 3, 4], turn=2),
    row(3, 1, 13.0, 4, [1, 2, 3, 9], turn=2),   # second child of 1: a fork
    row(4, -1, 11.0, 1, [7]),
    row(5, 2, 20.0, 5, [1, 2, 3, 4, 5], turn=3),
    row(6, 99, 30.0, 1, [8]),                  # parent outside the window: a root
]


def write(tmp_path: Path, rows: list[dict]) -> Path:
    f = tmp_path / "bailian.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_chains_become_sessions_and_extra_children_forks(tmp_path: Path) -> None:
    f = write(tmp_path, ROWS)
    assert detect_format(f) == "bailian"
    tr = read_trace(f)
    by = tr.by_id()
    main = by["bailian:1"]
    assert [t.hash_ids.tolist()[-1] for t in main.turns] == [3, 4, 5]
    assert [t.t for t in main.turns] == [0.0, 2.5, 10.0]
    # think: start-to-start gap (no response time in the trace)
    assert [t.think_s for t in main.turns] == [0.0, 2.5, 7.5]
    fork = by["bailian:3"]
    assert (fork.relation, fork.parent_id, fork.parent_turn, fork.join_turn) == (
        "fork", "bailian:1", 0, None)
    assert fork.start_s == 3.0 and fork.turns[0].think_s == 3.0
    assert by["bailian:6"].relation == "root" and by["bailian:4"].start_s == 1.0
    assert all(t.block_size == 16 for s in tr.sessions for t in s.turns)
    # the fork inherits the parent's 3 blocks: 48 potential cached tokens
    assert potential_cached_tokens(tr.sessions)[("bailian:3", 0)] == 48
    assert tr.n_requests() == len(ROWS)


@pytest.mark.parametrize("bad, field", [
    ({"parent_chat_id": -1, "timestamp": 1.0, "input_length": 16, "output_length": 1,
      "hash_ids": [1]}, "chat_id"),
    (row(7, -1, 1.0, 1, [1, 2]), "hash_ids"),
    ({**row(7, -1, 1.0, 1, [1]), "output_length": -1}, "output_length"),
    (row(1, -1, 1.0, 1, [1]), "chat_id"),  # duplicate
])
def test_bad_rows_name_line_and_field(tmp_path: Path, bad: dict, field: str) -> None:
    f = write(tmp_path, [*ROWS, bad])
    with pytest.raises(InputError) as e:
        read_trace(f, format="bailian")
    assert (e.value.source, e.value.where, e.value.field) == (str(f), "line 7", field)


def test_truncated_line(tmp_path: Path) -> None:
    f = write(tmp_path, ROWS)
    f.write_text(f.read_text()[:-20])
    with pytest.raises(InputError, match="invalid JSON") as e:
        read_trace(f, format="bailian")
    assert e.value.where == "line 6"


def test_parent_cycle_is_reported(tmp_path: Path) -> None:
    f = write(tmp_path, [row(1, -1, 0.0, 1, [1]), row(2, 3, 1.0, 1, [2]),
                         row(3, 2, 2.0, 1, [3])])
    with pytest.raises(InputError, match="cycle") as e:
        read_trace(f, format="bailian")
    assert e.value.field == "parent_chat_id"
