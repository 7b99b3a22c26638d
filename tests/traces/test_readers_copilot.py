"""Copilot coding agent reader: calls as turns, segment-derived hash ids, tool-batch think
time, recorded cached tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import detect_format, read_trace
from agentbench.traces.stats import potential_cached_tokens


def seg(seq: int, kind: str, role: str, n: int) -> dict:
    return {"type": kind, "role": role, "sequenceId": seq, "token_len": n}


def call(mid: str, ts: str, dur_ms: float, prompt: int, completion: int, cached: int,
         segs: list[dict], initiator: str = "agent") -> dict:
    return {"message_id": mid, "timestamp": ts, "duration_ms": dur_ms,
            "initiator_type": initiator, "model": "Model A", "result": "Success",
            "status_code": "OK",
            "tokens": {"total": prompt + completion, "prompt": prompt,
                       "completion": completion, "cached": cached,
                       "cached_pct": 100 * cached / prompt},
            "message_metadata": segs}


BASE = [seg(0, "System", "system", 700), seg(1, "UserMessage", "user", 290)]
SESSION: dict[str, Any] = {
    "session_id": "s1", "date": "2026-06-01",
    "turns": [
        {"turn_id": "t1",
         "llm_calls": [
             call("m1", "2026-06-01T10:00:00Z", 2000, 1000, 100, 0, BASE, "user"),
             call("m2", "2026-06-01T10:00:06Z", 1000, 1400, 50, 960,
                  [*BASE, seg(2, "Assistant", "assistant", 100),
                   seg(3, "ToolResult", "user", 300)]),
         ],
         "tool_batches": [{"timestamp": "2026-06-01T10:00:02Z", "duration_ms": 2500,
                           "auto_continue": True, "result": "Success", "request_id": "m1",
                           "function_calls": [{"name": "read_file", "status": 1,
                                               "duration_ms": 2400}]}]},
        {"turn_id": "t2",
         "llm_calls": [call("m3", "2026-06-01T10:01:00Z", 1500, 1500, 80, 1280,
                            [*BASE, seg(2, "Assistant", "assistant", 100),
                             seg(3, "ToolResult", "user", 300),
                             seg(4, "UserMessage", "user", 100)], "user")],
         "tool_batches": []},
    ],
}


def write(tmp_path: Path, data: Any, name: str = "copilot.json") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(data))
    return f


def test_calls_become_turns_with_recorded_tokens_and_timing(tmp_path: Path) -> None:
    f = write(tmp_path, {"window_start": "2026-06-01", "records": [SESSION]})
    assert detect_format(f) == "copilot"
    (s,) = read_trace(f).sessions
    assert [t.input_tokens for t in s.turns] == [1000, 1400, 1500]
    assert [t.output_tokens for t in s.turns] == [100, 50, 80]
    assert [t.cached_tokens for t in s.turns] == [0, 960, 1280]
    assert [t.t for t in s.turns] == [0.0, 6.0, 60.0]
    assert [t.api_s for t in s.turns] == [2.0, 1.0, 1.5]
    # think: the tool batch m1 asked for (2.5 s); before a user call, the gap from the
    # previous call's end (10:00:07 -> 10:01:00)
    assert [t.think_s for t in s.turns] == [0.0, 2.5, 53.0]


def test_resent_segments_share_blocks_consistently_with_the_cached_counts(
        tmp_path: Path) -> None:
    f = write(tmp_path, SESSION, "one.json")
    tr = read_trace(f)
    (s,) = tr.sessions
    pot = potential_cached_tokens(tr.sessions)
    # call 2 resends 990 segment tokens: 15 full blocks of 64 = 960 (= recorded cached)
    assert pot[("s1", 1)] == 960 == s.turns[1].cached_tokens
    # call 3 resends 1390 tokens: 21 blocks = 1344 >= the 1280 the service reused
    assert pot[("s1", 2)] == 1344 >= s.turns[2].cached_tokens  # type: ignore[operator]
    a, b = s.turns[0], s.turns[1]
    assert a.hash_ids[:15].tolist() == b.hash_ids[:15].tolist()
    assert a.hash_ids[15] != b.hash_ids[15]  # partial block vs full one


def test_jsonl_of_records(tmp_path: Path) -> None:
    other = {**SESSION, "session_id": "s2"}
    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps(SESSION) + "\n" + json.dumps(other) + "\n")
    tr = read_trace(f)
    assert [s.session_id for s in tr.sessions] == ["s1", "s2"]
    # same segment layout in another session: same ids (one scope per file)
    assert tr.sessions[0].turns[0].hash_ids.tolist() == tr.sessions[1].turns[0].hash_ids.tolist()


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r["turns"][0]["llm_calls"][1]["tokens"].pop("prompt"),
     "turns[0].llm_calls[1].tokens.prompt"),
    (lambda r: r["turns"][0]["llm_calls"][1]["tokens"].__setitem__("completion", -1),
     "turns[0].llm_calls[1].tokens.completion"),
    (lambda r: r["turns"][0]["llm_calls"][1].__setitem__("timestamp", "yesterday"),
     "turns[0].llm_calls[1].timestamp"),
    (lambda r: r["turns"][0]["llm_calls"][1]["tokens"].__setitem__("cached", 5000),
     "turns[0].llm_calls[1].cached_tokens"),
    (lambda r: r["turns"][0]["llm_calls"][1]["message_metadata"][0].pop("token_len"),
     "turns[0].llm_calls[1].message_metadata[0].token_len"),
    (lambda r: r.pop("turns"), "turns"),
])
def test_bad_records_name_record_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    rec = json.loads(json.dumps(SESSION))
    mutate(rec)
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({**SESSION, "session_id": "ok"}) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(InputError) as e:
        read_trace(f, format="copilot")
    assert (e.value.source, e.value.where, e.value.field) == (str(f), "line 2", field)
