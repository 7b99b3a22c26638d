"""OpenAI request-log reader: sessions by message-prefix extension or by key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import detect_format, read_trace
from agentbench.traces.stats import potential_cached_tokens
from agentbench.traces.words import chat_prompt_tokens, count_tokens

SYS = {"role": "system", "content": "You are a careful coding agent. " * 40}
U1 = {"role": "user", "content": "List the files."}
A1 = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}
T1 = {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"}


def rec(ts: Any, messages: list[dict], **kw: Any) -> dict:
    return {"timestamp": ts, "body": {"model": "m", "messages": messages, "max_tokens": 50},
            **kw}


def write(tmp_path: Path, rows: list[dict]) -> Path:
    f = tmp_path / "log.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_requests_extending_earlier_messages_continue_the_session(tmp_path: Path) -> None:
    other = [{"role": "system", "content": "Another agent."}, U1]
    f = write(tmp_path, [
        rec("2026-06-01T10:00:00Z", [SYS, U1], duration_s=2.0,
            response={"usage": {"completion_tokens": 12}}),
        rec(1780308001.0, other),  # epoch seconds (10:00:01Z) mix with ISO times
        rec("2026-06-01T10:00:05Z", [SYS, U1, A1, T1], duration_s=1.0,
            response={"choices": [{"message": {"role": "assistant", "content": "Two."}}],
                      "usage": {"prompt_tokens_details": {"cached_tokens": 128}}}),
    ])
    assert detect_format(f) == "openai-log"
    tr = read_trace(f)
    assert len(tr.sessions) == 2
    assert sorted(x.start_s for x in tr.sessions) == [0.0, 1.0]
    s = next(x for x in tr.sessions if len(x.turns) == 2)
    a, b = s.turns
    assert a.input_tokens == chat_prompt_tokens([SYS["content"], U1["content"]])
    assert (a.output_tokens, b.output_tokens) == (12, count_tokens("Two."))
    assert (b.t, b.think_s, a.api_s, b.api_s) == (5.0, 3.0, 2.0, 1.0)
    assert b.cached_tokens == 128
    pot = potential_cached_tokens(tr.sessions)
    assert pot[(s.session_id, 1)] == (a.input_tokens // 64) * 64 > 0


def test_explicit_session_key(tmp_path: Path) -> None:
    f = write(tmp_path, [
        rec(0.0, [SYS, U1], session_id="x"),
        rec(1.0, [{"role": "user", "content": "unrelated"}], session_id="x"),
        rec(2.0, [SYS, U1]),
        {**rec(3.0, [U1]), "body": {**rec(3.0, [U1])["body"], "user": "alice"}},
        {**rec(4.0, [T1]), "body": {**rec(4.0, [T1])["body"], "user": "alice"}},
    ])
    tr = read_trace(f, session_key="user")
    by = tr.by_id()
    assert len(by["x"].turns) == 2 and len(by["alice"].turns) == 2
    assert len(tr.sessions) == 3


def test_max_tokens_sizes_the_output_without_a_response(tmp_path: Path) -> None:
    f = write(tmp_path, [rec(0.0, [U1])])
    assert read_trace(f).sessions[0].turns[0].output_tokens == 50


@pytest.mark.parametrize("row, field", [
    ({"timestamp": 0.0, "body": {"model": "m", "messages": []}}, "messages"),
    ({"body": {"model": "m", "messages": [U1], "max_tokens": 5}}, "timestamp"),
    ({"timestamp": -1.0, "body": {"model": "m", "messages": [U1], "max_tokens": 5}},
     "timestamp"),
    ({"timestamp": 0.0, "body": {"model": "m", "messages": [U1]}}, "response"),
    ({"timestamp": 0.0, "body": {"model": "m", "messages": [{"content": "x"}],
                                 "max_tokens": 5}}, "messages[0].role"),
    ({"timestamp": 0.0, "body": {"model": "m", "messages": [U1], "max_tokens": -5}},
     "max_tokens"),
])
def test_bad_lines_name_line_and_field(tmp_path: Path, row: dict, field: str) -> None:
    f = write(tmp_path, [rec(0.0, [U1]), row])
    with pytest.raises(InputError) as e:
        read_trace(f, format="openai-log")
    assert (e.value.source, e.value.where, e.value.field) == (str(f), "line 2", field)
