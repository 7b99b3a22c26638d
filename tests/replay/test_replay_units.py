"""Replay's pure pieces on hand-built inputs: SSE reading, prompt layout and bodies,
schedules and the idle-gap cap."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench.prompts import layout as prompts
from agentbench.replay import schedule
from agentbench.replay.timers import Timers
from agentbench.testing.fastserver import events
from agentbench.traces import words as tokenize
from agentbench.traces.model import Turn
from agentbench.transport import sse

# ---------------------------------------------------------------- SSE


def ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat_delta(**delta: object) -> bytes:
    return ev({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


USAGE = ev({"choices": [], "usage": {"prompt_tokens": 90, "completion_tokens": 3,
                                     "prompt_tokens_details": {"cached_tokens": 64}}})
DONE = b"data: [DONE]\n\n"


def test_ttft_skips_role_only_and_empty_events() -> None:
    chunks = [chat_delta(role="assistant", content=""), chat_delta(content=""),
              chat_delta(content="a"), chat_delta(reasoning_content="b"),
              chat_delta(tool_calls=[{"index": 0, "function": {"arguments": "{"}}]), USAGE, DONE]
    r = sse.parse_stream(chunks, [10, 20, 30, 40, 50, 60, 70])
    assert r.token_event_ns == [30, 40, 50]  # TTFT event at 30, never the role event at 10
    assert r.token_event_tokens == [1, 1, 1]
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (90, 3, 64)
    assert r.done and r.error_type is None


def test_event_split_across_chunks_takes_the_completing_chunk_time() -> None:
    body = chat_delta(content="a") + chat_delta(content="b") + USAGE + DONE
    cut = body.index(b"\n\n") - 5  # first event completes in the second chunk
    r = sse.parse_stream([body[:cut], body[cut:cut + 40], body[cut + 40:]], [1, 2, 3])
    assert r.token_event_ns[0] == 2
    assert r.completion_tokens == 3 and r.done


def test_whitespace_json_and_crlf_separators() -> None:
    a = b'data: {"choices": [{"delta": {"content": "hi"}}]}\r\n\r\n'
    r = sse.parse_stream([a, b"data: [DONE]\r\n\r\n"], [5, 6])
    assert r.token_event_ns == [5] and r.done


def test_completions_usage_on_the_finish_chunk() -> None:
    evs = events(False, 4, prompt=77)
    r = sse.parse_stream(evs, list(range(len(evs))))
    assert r.token_event_ns == [0, 1, 2, 3]
    assert (r.prompt_tokens, r.completion_tokens) == (77, 4)


def test_multi_token_events_follow_usage() -> None:
    usage = ev({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}})
    chunks = [chat_delta(content=" baco dika"), chat_delta(content=" fumo lapi seto tiru"),
              usage, DONE]
    r = sse.parse_stream(chunks, [1, 2, 3, 4])
    assert r.token_event_tokens == [2, 4]  # approximate counts, scaled to usage's 6


@pytest.mark.parametrize(("chunks", "kind"), [
    ([chat_delta(content="a"), b"data: {not json\n\n", DONE], "malformed_sse"),
    ([b"garbage line\n\n", DONE], "malformed_sse"),
    ([chat_delta(content="a"), b'data: {"error": {"message": "boom"}}\n\n'], "stream_error"),
    ([chat_delta(content="a"), USAGE], "incomplete_stream"),
    ([chat_delta(content="a"), b'data: {"choices": [], "usage": {"x": \n\n', DONE],
     "malformed_sse"),
])
def test_bad_streams_are_named(chunks: list[bytes], kind: str) -> None:
    r = sse.parse_stream(chunks, list(range(len(chunks))))
    assert r.error_type == kind and r.error_message


def test_fast_and_event_paths_agree() -> None:
    evs = events(True, 20)
    t = list(range(len(evs)))
    assert sse.parse_stream(evs, t) == sse._parse_events(evs, t)
    whole = [b"".join(evs)]
    assert sse.parse_stream(whole, [9]).token_event_ns == [9] * 20


_EVENT_KINDS = [
    b'data: {"id":"a","choices":[{"delta":{"content":"x"}}]}\n\n',
    b'data: {"id":"a","choices":[{"delta":{"content":""}}]}\n\n',
    b'data: {"id":"a","choices":[{"delta":{"role":"assistant"}}]}\n\n',
    b'data: {"id":"a","choices":[{"delta":{"tool_calls":[{"index":0}]}}]}\n\n',
    b'data: {"id":"a","choices":[{"delta":{"reasoning_content":"r"}}]}\n\n',
    b'data: {"id":"a","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\n',
    b'data: {"id":"a","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}}\n\n',
    b'data: {"error":{"message":"boom"}}\n\n',
    b'data: { "error": "spaced"}\n\n',
    b'data: {"id":"a","choices":[{"delta":{"content":"has \\"error\\" in it"}}]}\n\n',
    b'data: {"id":"a"}\n\n',
    b"data: [1,2]\n\n",
    b": comment\n\n",
    b"data: {\n\n",
    b'data: {"id":"a",\ndata: "b":1}\n\n',
    b'data: {"id":"b","choices":[{"delta":{"content":"y"}}]}\n\n',
    b'data: {"id":"a","choices":[{"delta":{"content" : "z"}}]}\n\n',
    b'data: {"id":"a","choices":[{"delta":{"role":"assistant","content":""}}]}\n\n',
    b'data: {"id":"a","choices":[{"text":"t"}]}\n\n',
    b"data: {}\n\n",
    # token keys in events that do not start as a token event does
    b'data:{"error":{"message":"boom","content":"partial"}}\n\n',
    b'data: { "error": {"message":"boom","text":"t"}}\n\n',
    b': keepalive "content":"x}\n\n',
    b'bogus "content":"x}\n\n',
    b"data: [DONE]\n\n",
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("completion", [5, 7, 10**6, sse.USAGE_MAX, sse.USAGE_MAX + 1, 10**30,
                                        int(1e30), 3 * 10**40 + 1])
def test_token_counts_follow_usage_whatever_its_size(completion: int) -> None:
    """Counts per event sum to ``usage.completion_tokens`` (each at least 1) up to
    ``USAGE_MAX``, at once (it used to add one token per loop turn); past it the count is
    impossible usage and each event counts 1 (docs/reliability.md)."""
    evs = [b'data: {"choices":[{"delta":{"content":"%s"}}]}' % (b"ab" * k) for k in (1, 5, 2)]
    counts = sse._tokens_per_event(evs, completion)
    assert len(counts) == 3 and min(counts) >= 1
    assert sum(counts) == (completion if completion <= sse.USAGE_MAX else 3)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(range(len(_EVENT_KINDS))), max_size=12),
       st.lists(st.integers(1, 400), max_size=6), st.booleans())
def test_fast_path_answers_as_the_event_path(kinds: list[int], cuts: list[int],
                                             per_event: bool) -> None:
    """Whatever the events and however they were cut into chunks, the fast path (when it
    answers) says what the event-by-event path says."""
    evs = [_EVENT_KINDS[k] for k in kinds]
    if per_event:
        chunks = evs
    else:
        body, chunks, pos = b"".join(evs), [], 0
        for c in cuts:
            if pos < len(body):
                chunks.append(body[pos:pos + c])
                pos += c
        if pos < len(body):
            chunks.append(body[pos:])
    t = list(range(10, 10 * len(chunks) + 10, 10))
    fast = sse._parse_fast(chunks, t, b"".join(chunks))
    if fast is not None:
        assert fast == sse._parse_events(chunks, t)
    assert sse.parse_stream(chunks, t) == (fast or sse._parse_events(chunks, t))

# ---------------------------------------------------------------- prompts


def turn(k: int, ids: list[int], n: int, block: int = 16) -> Turn:
    return Turn(turn=k, t=0.0, think_s=0.0, api_s=None, input_tokens=n, output_tokens=1,
                hash_ids=np.asarray(ids, dtype=np.int64), block_size=block)


def test_layout_counts_and_tail_continues_into_next_turn() -> None:
    t0 = turn(0, [1, 2], 16 * 2 + 5)  # two blocks + a 5-token tail
    t1 = turn(1, [1, 2, 3], 16 * 3 + 2)
    cache = prompts.BlockCache("chat")
    c0 = cache.content(7, prompts.layout(t0, "s", prompts.chat_overhead(), 0, t1)).decode()
    c1 = cache.content(7, prompts.layout(t1, "s", prompts.chat_overhead(), 0, None)).decode()
    # 37 - 3 template tokens = 34: the chat request counts exactly the trace's 37
    assert tokenize.chat_prompt_tokens([c0]) == 37
    assert tokenize.chat_prompt_tokens([c1]) == 50
    assert c1.startswith(c0)  # the tail of turn 0 is the start of block 3
    # without a next turn extending it, the tail is unique text
    c0u = cache.content(7, prompts.layout(t0, "s", 3, 0, None)).decode()
    assert c0u[:32 * 5] == c0[:32 * 5] and c0u != c0


def test_layout_shared_prefix_and_completions_ids() -> None:
    t = turn(0, [4, 5, 6], 40)  # last block partial (8 tokens)
    segs = prompts.layout(t, "s", 0, 10)
    assert segs[0].shared and sum(s.n for s in segs) == 40
    cache = prompts.BlockCache("completions")
    ids = [int(x) for x in cache.content(3, segs).split(b",")]
    assert len(ids) == 40
    assert ids[10:26] == tokenize.block_token_ids(3, 4, 16)
    other = [int(x) for x in cache.content(4, segs).split(b",")]
    assert other[:10] == ids[:10] and other[10:] != ids[10:]  # only the prefix is shared


def test_block_cache_memory_follows_live_salts() -> None:
    cache = prompts.BlockCache("chat")
    cache.acquire(1)
    cache.acquire(2)
    cache.content(1, [prompts.Segment(5, 16)])
    cache.content(2, [prompts.Segment(5, 16)])
    assert cache.n_fragments() == 2
    cache.release(1)
    assert cache.n_fragments() == 1


def test_salts_differ_by_copy_and_scope() -> None:
    a = prompts.salt_for(0, 0, "x")
    assert a == prompts.salt_for(0, 0, "x")
    assert len({a, prompts.salt_for(0, 1, "x"), prompts.salt_for(0, 0, "y"),
                prompts.salt_for(1, 0, "x")}) == 4


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_body_template(api: str) -> None:
    tpl = prompts.body_template(api, "m", {"temperature": 0}, ignore_eos=True)
    content = b" baco dika" if api == "chat" else b"1,2,3"
    body = json.loads(tpl.render(content, 17))
    assert body["max_tokens"] == body["min_tokens"] == 17 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0 and body["model"] == "m"
    if api == "chat":
        assert body["messages"] == [{"role": "user", "content": " baco dika"}]
    else:
        assert body["prompt"] == [1, 2, 3]
    plain = json.loads(prompts.body_template(api, "m", {}, ignore_eos=False).render(content, 5))
    assert "ignore_eos" not in plain and "min_tokens" not in plain
    with pytest.raises(ValueError):
        prompts.body_template(api, "m", {"stream": False}, ignore_eos=False)

# ---------------------------------------------------------------- schedules


def test_poisson_is_seeded_and_has_the_rate() -> None:
    a = list(zip(range(2000), schedule.arrival_offsets_ns("poisson", 10.0, 0, 0), strict=False))
    b = list(zip(range(2000), schedule.arrival_offsets_ns("poisson", 10.0, 0, 0), strict=False))
    c = list(zip(range(50), schedule.arrival_offsets_ns("poisson", 10.0, 1, 0), strict=False))
    assert a == b and a[:50] != c
    offs = np.array([o for _, o in a])
    assert offs[0] == 0 and np.all(np.diff(offs) >= 0)
    assert abs(offs[-1] / 1e9 / 1999 - 0.1) < 0.01  # mean gap 1/rate


def test_constant_and_trace_arrivals() -> None:
    it = schedule.arrival_offsets_ns("constant", 4.0, 0, 0)
    assert [next(it) for _ in range(3)] == [0, 250_000_000, 500_000_000]
    offs = list(schedule.arrival_offsets_ns("trace", None, 0, 0, [5.0, 3.0, 4.0], 0.5))
    assert offs == [0, 500_000_000, 1_000_000_000]


def test_turn_targets() -> None:
    prev = Turn(0, 10.0, 0.0, 2.0, 1, 1, np.zeros(0, np.int64), 16)
    cur = Turn(1, 15.0, 3.0, 1.0, 1, 1, np.zeros(0, np.int64), 16)
    kw = dict(prev=prev, ready_ns=1_000, prev_sent_ns=500, session_start_ns=100, first_t=10.0,
              time_scale=0.5, api_scale=2.0)
    # think-only: ready + 3 s x 0.5
    assert schedule.turn_target_ns("think-only", cur, **kw) == 1_000 + 1_500_000_000
    # original: start + (15 - 10) s x 0.5
    assert schedule.turn_target_ns("original", cur, **kw) == 100 + 2_500_000_000
    # api-scaled: prev sent + (2 s x 2 + 3 s) x 0.5
    assert schedule.turn_target_ns("api-scaled", cur, **kw) == 500 + 3_500_000_000
    # never before the previous response ended
    assert schedule.turn_target_ns("original", cur, **{**kw, "ready_ns": 9 * 10**9}) == 9 * 10**9
    # a session's first turn (no previous one) waits its think time in every strategy: a
    # child's counts from its start
    for strategy in ("think-only", "original", "api-scaled"):
        first = schedule.turn_target_ns(strategy, cur, **{**kw, "prev": None})
        assert first == 1_000 + 1_500_000_000, strategy


def test_warmup_start_is_seeded() -> None:
    picks = [schedule.warmup_start_turn(0, lane, 40, True) for lane in range(20)]
    assert picks == [schedule.warmup_start_turn(0, lane, 40, True) for lane in range(20)]
    assert len(set(picks)) > 5 and all(0 <= p < 40 for p in picks)
    assert schedule.warmup_start_turn(0, 3, 40, False) == 0


@pytest.mark.timeout(10)
async def test_idle_cap_pulls_timers_in_keeping_their_spacing() -> None:
    timers = Timers(0, idle_cap_ns=20_000_000)
    timers.request_started()  # busy while both timers are set: nothing is pulled in yet
    now = timers.now_ns()
    a = asyncio.ensure_future(timers.wait_until(now + 100 * 10**9))
    b = asyncio.ensure_future(timers.wait_until(now + 100 * 10**9 + 30_000_000))
    await asyncio.sleep(0)
    assert timers.pulled_in_ns == 0
    timers.request_ended()  # idle now: both move by the same amount
    got = await asyncio.wait_for(asyncio.gather(a, b), 5)
    assert 15_000_000 <= got[0] - now <= 100_000_000  # pulled in to ~20 ms
    assert got[1] - got[0] == 30_000_000
    assert timers.pulled_in_ns > 99 * 10**9


@pytest.mark.timeout(10)
async def test_no_pull_in_while_a_request_is_in_flight() -> None:
    timers = Timers(0, idle_cap_ns=1_000_000)
    timers.request_started()
    now = timers.now_ns()
    w = asyncio.ensure_future(timers.wait_until(now + 50_000_000))
    got = await asyncio.wait_for(w, 5)
    assert got == now + 50_000_000 and timers.pulled_in_ns == 0
    assert timers.now_ns() >= got


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("shared", [0, 7])
def test_session_memo_matches_layout(api: str, shared: int) -> None:
    """The per-session memo builds exactly what the reference layout says, including tails
    shorter than the template cost (the cut reaches into a whole block) and turns that do
    not extend the previous one."""
    turns = [turn(0, [1, 2], 33), turn(1, [1, 2, 3], 16 * 3 + 1), turn(2, [1, 2, 3, 4], 64),
             turn(3, [9, 2], 20), turn(4, [9, 2, 5], 70), turn(5, [9, 2, 5, 6], 64 + 10)]
    cache = prompts.BlockCache(api)
    over = prompts.chat_overhead() if api == "chat" else 0
    memo = prompts.SessionPrompt(cache, 11, "s", over, shared)
    tpl = prompts.body_template(api, "m", {}, ignore_eos=False)
    for i, t in enumerate(turns):
        nxt = turns[i + 1] if i + 1 < len(turns) else None
        want = cache.content(11, prompts.layout(t, "s", over, shared, nxt), 16)
        got = memo.build(t, nxt)
        assert json.loads(tpl.render_fragments(got, 3)) == json.loads(tpl.render(want, 3))
        if api == "chat":
            assert tokenize.chat_prompt_tokens([want.decode()]) == t.input_tokens


def test_weka_turns_memo_and_counts(weka_trace) -> None:  # type: ignore[no-untyped-def]
    sess = next(s for s in weka_trace.sessions if s.session_id == "trace_0291")
    cache = prompts.BlockCache("chat")
    memo = prompts.SessionPrompt(cache, 5, sess.session_id, prompts.chat_overhead(), 0)
    prev = b""
    for k, t in enumerate(sess.turns[:12]):
        nxt = sess.turns[k + 1] if k + 1 < len(sess.turns) else None
        content = b"".join(memo.build(t, nxt))
        assert content == cache.content(5, prompts.layout(t, sess.session_id, 3, 0, nxt), 64)
        assert tokenize.chat_prompt_tokens([content.decode()]) == t.input_tokens
        m = len(sess.turns[k - 1].hash_ids) if k else 0
        if k and np.array_equal(t.hash_ids[:m], sess.turns[k - 1].hash_ids):
            assert content.startswith(prev)
        prev = content


def test_spool_left_by_a_killed_run_is_recovered(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    from agentbench.results import schema as records
    from agentbench.results.schema import RequestRecord
    from agentbench.results.writer import ResultsWriter, recover
    from agentbench.transport.finish import finish_record

    w = ResultsWriter(tmp_path, flush_rows=2)
    for i in range(5):
        rec = RequestRecord(i, "c=1", "measure", "ep", 0, "t#0", "t", "root", 0, i, 10, 5, 1, 0,
                            sent_ns=20, end_ns=30, http_status=200)
        rec.chunks = events(True, 1)
        rec.chunk_ns = [25] * len(rec.chunks)
        w.add_request(finish_record(rec))
    # no close(): as if the process was killed after two batches (4 rows) reached the spool;
    # the fifth row is only in the journal, and the last journal line is torn by the kill
    with open(tmp_path / (records.REQUESTS_FILE + ".spool.arrows"), "ab") as f:
        f.write(b"\x00\x01 torn tail")
    with open(tmp_path / (records.REQUESTS_FILE + ".journal.jsonl"), "ab") as f:
        f.write(b'5 {"request_id": 5, "sta')
    assert recover(tmp_path) == [records.REQUESTS_FILE]  # the only spool with rows
    t = pq.read_table(tmp_path / records.REQUESTS_FILE).to_pandas()
    assert list(t.request_id) == [0, 1, 2, 3, 4]
    assert (t.first_token_ns == 25).all() and (t.completion_tokens == 1).all()


def test_replay_never_imports_metrics_or_report() -> None:
    import ast
    from pathlib import Path

    import agentbench.replay as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(("agentbench.metrics", "agentbench.report")), path
