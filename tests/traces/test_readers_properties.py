"""Property tests over the readers: generated valid records read back consistently;
corrupted records raise InputError (naming line/record and field) and nothing else."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentbench.errors import InputError
from tests.helpers import jsonl, read_text

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# ---- generators of valid records -------------------------------------------------------

@st.composite
def mooncake_rows(draw: st.DrawFn) -> list[dict]:
    n = draw(st.integers(1, 25))
    rows = []
    for _ in range(n):
        length = draw(st.integers(0, 5000))
        k = draw(st.integers(0, math.ceil(length / 512)))
        rows.append({"timestamp": draw(st.integers(0, 10**7)), "input_length": length,
                     "output_length": draw(st.integers(0, 2000)),
                     "hash_ids": draw(st.lists(st.integers(0, 50), min_size=k, max_size=k))})
    return rows


@st.composite
def bailian_rows(draw: st.DrawFn) -> list[dict]:
    n = draw(st.integers(1, 25))
    rows: list[dict] = []
    ts = 0
    for i in range(n):
        parent = draw(st.sampled_from([-1, *range(i)])) if i else -1
        ts += draw(st.integers(0, 10**4))  # a child comes after its parent
        length = draw(st.integers(1, 400))
        k = draw(st.integers(0, math.ceil(length / 16)))
        rows.append({"chat_id": i, "parent_chat_id": parent,
                     "timestamp": ts / 10,
                     "input_length": length, "output_length": draw(st.integers(0, 300)),
                     "turn": 1, "type": "text",
                     "hash_ids": draw(st.lists(st.integers(0, 30), min_size=k, max_size=k))})
    return rows


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=120)


@st.composite
def sharegpt_records(draw: st.DrawFn) -> list[dict]:
    recs = []
    for _ in range(draw(st.integers(1, 4))):
        conv = [{"from": draw(st.sampled_from(["system", "human", "gpt", "tool"])),
                 "value": draw(TEXT)} for _ in range(draw(st.integers(1, 8)))]
        recs.append({"conversations": conv})
    return recs


# ---- valid records read back consistently ----------------------------------------------

@SETTINGS
@given(mooncake_rows())
def test_mooncake_reads_back(rows: list[dict]) -> None:
    tr = read_text("m.jsonl", jsonl(rows), "mooncake")
    t0 = min(r["timestamp"] for r in rows)
    assert len(tr.sessions) == len(rows)
    for s, r in zip(tr.sessions, rows, strict=True):
        (t,) = s.turns
        assert (t.input_tokens, t.output_tokens) == (r["input_length"], r["output_length"])
        assert t.hash_ids.tolist() == r["hash_ids"]
        assert s.start_s == (r["timestamp"] - t0) / 1000
    tr.validate()


@SETTINGS
@given(bailian_rows())
def test_bailian_reads_back(rows: list[dict]) -> None:
    tr = read_text("b.jsonl", jsonl(rows), "bailian")
    tr.validate()
    turns = {t.hash_ids.tobytes() + bytes([0]) + str(t.input_tokens).encode()
             for s in tr.sessions for t in s.turns}
    assert tr.n_requests() == len(rows)
    assert turns == {np.asarray(r["hash_ids"], dtype=np.int64).tobytes() + bytes([0])
                     + str(r["input_length"]).encode() for r in rows}
    roots = sum(r["parent_chat_id"] == -1 for r in rows)
    children: dict[int, int] = {}
    for r in rows:
        if r["parent_chat_id"] != -1:
            children[r["parent_chat_id"]] = children.get(r["parent_chat_id"], 0) + 1
    # one session per root plus one fork per extra child
    assert len(tr.sessions) == roots + sum(c - 1 for c in children.values())
    for s in tr.sessions:
        assert all(b.t >= a.t for a, b in zip(s.turns, s.turns[1:], strict=False))


@SETTINGS
@given(sharegpt_records(), st.integers(0, 3))
def test_sharegpt_reads_back(recs: list[dict], seed: int) -> None:
    tr = read_text("s.json", json.dumps(recs), "sharegpt", seed=seed, block_size=8)
    replies = [sum(m["from"] == "gpt" for m in r["conversations"]) for r in recs]
    assert [len(s.turns) for s in tr.sessions] == [n for n in replies if n]
    for s in tr.sessions:
        for a, b in zip(s.turns, s.turns[1:], strict=False):
            assert b.input_tokens > a.input_tokens and b.t >= a.t and b.think_s > 0
            full = a.input_tokens // 8
            assert b.hash_ids[:full].tolist() == a.hash_ids[:full].tolist()
    again = read_text("s.json", json.dumps(recs), "sharegpt", seed=seed, block_size=8)
    assert [s.turns for s in again.sessions] == [s.turns for s in tr.sessions]  # same draws


# ---- corrupted records raise InputError and nothing else -------------------------------

def corrupt(draw: st.DrawFn, rows: list[dict], fields: list[str]) -> tuple[str, int, str]:
    """Apply one targeted corruption; returns (file text, 0-based row, field)."""
    i = draw(st.integers(0, len(rows) - 1))
    field = draw(st.sampled_from(fields))
    kind = draw(st.sampled_from(["missing", "negative", "string", "null"]))
    row = dict(rows[i])
    if kind == "missing":
        row.pop(field)
    elif kind == "negative":
        row[field] = -draw(st.integers(1, 10**6))
    elif kind == "string":
        row[field] = "12"
    else:
        row[field] = None
    rows = [*rows[:i], row, *rows[i + 1:]]
    return jsonl(rows), i, field


def expect_input_error(read: Callable[[], Any]) -> InputError:
    try:
        read()
    except InputError as e:
        return e
    raise AssertionError("no InputError")


@SETTINGS
@given(st.data())
def test_mooncake_corruptions(data: st.DataObject) -> None:
    rows = data.draw(mooncake_rows())
    text, i, field = corrupt(data.draw, rows, ["input_length", "output_length", "hash_ids"])
    e = expect_input_error(lambda: read_text("m.jsonl", text, "mooncake"))
    assert (e.where, e.field) == (f"line {i + 1}", field)


@SETTINGS
@given(st.data())
def test_bailian_corruptions(data: st.DataObject) -> None:
    rows = data.draw(bailian_rows())
    text, i, field = corrupt(data.draw, rows, ["chat_id", "input_length", "output_length",
                                               "hash_ids", "timestamp"])
    try:
        read_text("b.jsonl", text, "bailian")
    except InputError as e:
        assert e.where == f"line {i + 1}" or e.field in ("parent_chat_id", "chat_id")
        return
    # a negative chat_id or timestamp is a legal value
    assert field in ("chat_id", "timestamp")


@SETTINGS
@given(mooncake_rows(), st.data())
def test_too_many_hash_ids_are_named(rows: list[dict], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(rows) - 1))
    rows[i] = {**rows[i], "hash_ids": list(range(math.ceil(rows[i]["input_length"] / 512) + 1))}
    e = expect_input_error(lambda: read_text("m.jsonl", jsonl(rows), "mooncake"))
    assert (e.where, e.field) == (f"line {i + 1}", "hash_ids")


@SETTINGS
@given(st.data(), st.sampled_from(["mooncake", "bailian", "sharegpt", "openai-log", "copilot",
                                   "weka"]))
def test_arbitrary_damage_is_input_error_or_a_valid_trace(data: st.DataObject,
                                                          fmt: str) -> None:
    """Truncation, byte flips and junk lines: InputError or a trace that validates."""
    base = {
        "mooncake": lambda: jsonl(data.draw(mooncake_rows())),
        "bailian": lambda: jsonl(data.draw(bailian_rows())),
        "sharegpt": lambda: json.dumps(data.draw(sharegpt_records())),
        "openai-log": lambda: jsonl([
            {"timestamp": float(k), "body": {"model": "m", "max_tokens": 9, "messages": [
                {"role": "user", "content": "hello " * k}]}} for k in range(3)]),
        "copilot": lambda: json.dumps({"session_id": "s", "turns": [{"llm_calls": [
            {"message_id": "a", "timestamp": 1.0, "duration_ms": 5,
             "tokens": {"prompt": 100, "completion": 3, "cached": 0},
             "message_metadata": [{"type": "System", "role": "system", "sequenceId": 0,
                                   "token_len": 90}]}], "tool_batches": []}]}),
        "weka": lambda: json.dumps({"id": "w", "block_size": 64, "requests": [
            {"t": 0.0, "type": "n", "in": 130, "out": 2, "hash_ids": [1, 2, 3]},
            {"t": 1.0, "type": "subagent", "agent_id": "a", "requests": [
                {"t": 0.0, "type": "n", "in": 10, "out": 1, "hash_ids": [9]}]},
            {"t": 2.0, "type": "n", "in": 200, "out": 2, "hash_ids": [1, 2, 3, 4]}]}),
    }[fmt]
    raw = base().encode()
    how = data.draw(st.sampled_from(["truncate", "flip", "junk"]))
    if how == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif how == "flip":
        k = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:k] + bytes([data.draw(st.integers(0, 255))]) + raw[k + 1:]
    else:
        raw = raw + b"\n" + data.draw(st.binary(min_size=1, max_size=20)) + b"\n"
    assume(raw.strip())
    name = {"sharegpt": "x.json", "copilot": "x.json", "weka": "x.json"}.get(fmt, "x.jsonl")
    try:
        tr = read_text(name, raw, fmt)
    except InputError as e:
        assert str(e) and "\n" not in str(e)
        return
    tr.validate()


@SETTINGS
@given(st.data())
def test_openai_log_regroups_interleaved_conversations(data: st.DataObject) -> None:
    """Each conversation's requests resend its history plus new messages; interleaved in
    time, they regroup into one session per conversation, turns in order."""
    k = data.draw(st.integers(1, 4))
    rows, expect = [], []
    for c in range(k):
        msgs = [{"role": "system", "content": f"agent {c}: " + data.draw(TEXT)}]
        times = sorted(data.draw(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1,
                                          max_size=6, unique=True)))
        for ts in times:
            msgs = [*msgs, {"role": "user", "content": data.draw(TEXT)}]
            rows.append({"timestamp": ts, "body": {"model": "m", "max_tokens": 7,
                                                   "messages": msgs}})
            msgs = [*msgs, {"role": "assistant", "content": data.draw(TEXT)}]
        expect.append(len(times))
    order = data.draw(st.permutations(range(len(rows))))
    tr = read_text("o.jsonl", jsonl([rows[i] for i in order]), "openai-log", block_size=4)
    assert sorted(len(s.turns) for s in tr.sessions) == sorted(expect)
    for s in tr.sessions:
        for a, b in zip(s.turns, s.turns[1:], strict=False):
            assert b.t >= a.t and b.input_tokens > a.input_tokens
            assert b.hash_ids[: a.input_tokens // 4].tolist() == a.hash_ids[
                : a.input_tokens // 4].tolist()


@SETTINGS
@given(st.data())
def test_copilot_prefix_sharing_follows_the_segments(data: st.DataObject) -> None:
    """Calls that resend the previous call's segments and append new ones: the potential
    cached tokens of a call are the whole blocks of the segments it resends."""
    from agentbench.traces.stats import potential_cached_tokens

    bs = data.draw(st.sampled_from([4, 16, 64]))
    segs: list[dict] = []
    calls = []
    for k in range(data.draw(st.integers(1, 6))):
        resent = sum(s["token_len"] for s in segs)
        for _ in range(data.draw(st.integers(1, 3))):
            segs = [*segs, {"type": data.draw(st.sampled_from(["System", "UserMessage",
                                                                "ToolResult"])),
                            "role": "user", "sequenceId": len(segs),
                            "token_len": data.draw(st.integers(1, 200))}]
        prompt = sum(s["token_len"] for s in segs) + data.draw(st.integers(0, 30))
        calls.append(({"message_id": f"m{k}", "timestamp": float(k), "duration_ms": 10,
                       "tokens": {"prompt": prompt, "completion": 1, "cached": 0},
                       "message_metadata": list(segs)}, resent))
    doc = {"session_id": "s", "turns": [{"llm_calls": [c for c, _ in calls],
                                          "tool_batches": []}]}
    tr = read_text("c.json", json.dumps(doc), "copilot", block_size=bs)
    pot = potential_cached_tokens(tr.sessions)
    assert [pot[("s", k)] for k in range(len(calls))] == [(r // bs) * bs for _, r in calls]
