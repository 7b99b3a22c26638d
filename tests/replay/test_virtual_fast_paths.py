"""The virtual-time replay's fast paths give what the plain ones give:

- the virtual loop's own turn (a heap of tuples, asyncio's rules for cancelled timers);
- a simulated prompt's block hashes, each lineage of turns hashed once, against their
  definition and the builder that built each turn from the previous one;
- a metrics sample that reads decode runs without cutting them, against one that cuts;
- a decode run's step ends in numpy and in Python;
- the writer's own flushes in virtual time.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pytest

from agentbench.prompts.segments import WEIGHTS, SegmentPrompt
from agentbench.replay import run
from agentbench.replay.clock import VIRTUAL, VirtualEventLoop, run_on
from agentbench.results import schema as records
from agentbench.results.writer import ResultsWriter
from agentbench.scenario.loading import load_scenario
from agentbench.sim import decoderuns
from agentbench.sim.virtual import TimerDriver
from agentbench.traces.model import Turn
from tests.helpers import SCENARIOS
from tests.replay.segments_reference import ReferencePrompt
from tests.replay.test_virtual_time import _same_run

M64 = (1 << 64) - 1
GOLD = 0x9E3779B97F4A7C15


# ------------------------------------------------------------------ the loop's turn

def test_cancelled_timers_never_run_and_the_rest_keep_their_order() -> None:
    """Over 100 timers, most cancelled: asyncio's rule drops them from the heap at once;
    the ones left run in time order, ties in the order scheduled."""
    rng = random.Random(11)
    ran: list[tuple[float, int]] = []
    kept: list[tuple[float, int]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handles = []
        for i in range(600):
            when = rng.choice([1.0, 1.5, 2.0, 3.0])
            handles.append((loop.call_at(when, ran.append, (when, i)), (when, i)))
        for h, key in handles:
            if rng.random() < 0.8:
                h.cancel()
            else:
                kept.append(key)
        await asyncio.sleep(5)

    run_on(VIRTUAL, main())
    assert ran == sorted(kept)
    assert 0 < len(kept) < 600


def test_light_handles_cancel_carry_their_context_and_report_errors() -> None:
    """The virtual loop's own handles (outside debug mode) behave as asyncio's: a
    cancelled callback never runs, a callback runs in the context it was given (or a copy
    of the current one), its exception goes to the loop's handler and the loop goes on."""
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="none")
    seen: list[object] = []
    errors: list[dict[str, object]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        var.set("current")
        ctx = contextvars.copy_context()
        ctx.run(var.set, "given")
        loop.call_soon(lambda: seen.append(var.get()))
        loop.call_soon(lambda: seen.append(var.get()), context=ctx)
        loop.call_soon(seen.append, "cancelled").cancel()
        loop.call_at(loop.time() + 1, seen.append, "timer").cancel()
        loop.call_at(loop.time() + 2, lambda: 1 / 0)
        loop.call_later(3, seen.append, "after the error")
        assert "_Handle" in repr(type(loop.call_soon(lambda: None)))
        await asyncio.sleep(5)

    run_on(VIRTUAL, main())
    assert seen == ["current", "given", "after the error"]
    assert len(errors) == 1 and isinstance(errors[0]["exception"], ZeroDivisionError)


def test_debug_mode_runs_on_the_virtual_loop() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        await asyncio.sleep(3600)  # an hour of simulated time, at once
        return loop.time()

    assert run_on(VIRTUAL, main()) == pytest.approx(3600)


# ------------------------------------------------------------------ prompt hashes

def _mix(x: int) -> int:
    z = (x + GOLD) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _defined_hashes(idents: list[int], lens: list[int], bsz: int) -> list[int]:
    """The block hashes by their definition (docs in ``prompts.segments``), one block at a
    time: the chain of the segments before the block's last token, the position of that
    token in its segment, and the token's place."""
    w = [int(x) for x in WEIGHTS.get(len(idents))]
    out = []
    n_tok = sum(lens)
    for b in range(n_tok // bsz):
        last = b * bsz + bsz - 1
        start, j = 0, 0
        while start + lens[j] <= last:
            start += lens[j]
            j += 1
        before = sum(_mix(idents[k]) * w[k] for k in range(j)) & M64
        inner = (_mix((idents[j] + (last - start + 1) * GOLD) & M64) * w[j]) & M64
        h = _mix((before + inner + last) & M64)
        out.append(h - (1 << 64) if h >= 1 << 63 else h)
    return out


def _session(rng: random.Random, bs: int, other_bs: int | None = None) -> list[Turn]:
    """An agent session: a growing context, now and then a shorter one (a compaction) or
    a changed block, tails of any length; with ``other_bs``, now and then a turn of that
    block size over the same ids."""
    ids: list[int] = []
    turns = []
    for k in range(12):
        if other_bs is not None and rng.random() < 0.3:
            bs, other_bs = other_bs, bs
        r = rng.random()
        if r < 0.15 and ids:
            ids = ids[: rng.randrange(len(ids))]
        elif r < 0.25 and ids:
            ids[rng.randrange(len(ids))] = rng.randrange(1 << 40)
        ids += [rng.randrange(1 << 40) for _ in range(rng.randrange(0, 9))]
        n = len(ids) * bs + rng.randrange(0, 3 * bs)
        turns.append(Turn(turn=k, t=float(k), think_s=0.0, api_s=None, input_tokens=n,
                          output_tokens=5, hash_ids=np.array(ids, dtype=np.int64),
                          block_size=bs))
    return turns


@pytest.mark.parametrize("seed", range(20))
def test_prompt_hashes_are_the_defined_ones(seed: int) -> None:
    """Each prompt of a session equals the hashes' definition and the builder before
    lineages were hashed once (``ReferencePrompt``), built with the session's turns (the
    lineages hashed ahead), without them, in order or from a warm start on, now and then
    the same turn twice."""
    rng = random.Random(seed)
    bs, bsz = rng.choice([(4, 4), (8, 4), (4, 8), (16, 16)])
    chat, shared = rng.random() < 0.5, rng.choice([0, 0, 7])
    turns = _session(rng, bs, other_bs=rng.choice([None, 2 * bs]) if seed >= 6 else None)
    args = (rng.randrange(1, 1 << 20), f"s{seed}", 9 if chat else 0, shared, chat, bsz)
    first = rng.choice([0, 0, rng.randrange(len(turns))])  # a warm start's turn
    ahead, loose, ref = SegmentPrompt(*args, turns), SegmentPrompt(*args), \
        ReferencePrompt(*args)
    prev = None
    for k in range(first, len(turns)):
        turn, nxt = turns[k], turns[k + 1] if k + 1 < len(turns) else None
        got = ahead.build(turn, nxt)
        # the prompt before leads this one by at least ``kept`` hashes (the memo's share)
        if prev is not None:
            assert got.hashes[:ahead.kept] == prev[:ahead.kept]
        prev = got.hashes
        if rng.random() < 0.3:  # the same turn again: the same prompt, a new array
            again = ahead.build(turn, nxt)
            assert (again.tokens, again.hashes) == (got.tokens, got.hashes)
            assert again.hashes is not got.hashes
        want = ref.build(turn, nxt)
        assert (got.tokens, got.hashes) == (want.tokens, want.hashes)
        assert (loose.build(turn, nxt).hashes) == want.hashes
        idents = [int(x) for x in ref._prev_idents]
        lens = [int(x) for x in ref._prev_lens]
        assert sum(lens) == got.tokens
        assert got.hashes.tolist() == _defined_hashes(idents, lens, bsz)


@pytest.mark.parametrize("name", ["scale-out.yaml", "pd-ratio.yaml", "agentx.yaml"])
def test_prompt_hashes_of_shipped_traces_are_those_built_turn_by_turn(name: str) -> None:
    """The sessions of shipped scenarios' traces (compactions, forks, long tails), every
    turn: the builder that hashes a lineage once gives the hashes of the one that built
    each turn from the previous one, for the block sizes and templates runs use."""
    from agentbench.replay.runsetup import load_trace
    from agentbench.scenario.loading import expand_variants

    sc = expand_variants(load_scenario(SCENARIOS / name))[0]
    trace = load_trace(sc)
    rng = random.Random(name)
    n = 0
    for sess in trace.sessions[:60]:
        bsz = rng.choice([16, 16, 32, 8])
        chat = rng.random() < 0.8
        args = (rng.randrange(1 << 48), sess.session_id, 9 if chat else 0,
                rng.choice([0, 0, 300]), chat, bsz)
        ahead, ref = SegmentPrompt(*args, sess.turns), ReferencePrompt(*args)
        for k, turn in enumerate(sess.turns):
            nxt = sess.turns[k + 1] if k + 1 < len(sess.turns) else None
            got, want = ahead.build(turn, nxt), ref.build(turn, nxt)
            assert (got.tokens, got.hashes) == (want.tokens, want.hashes), (sess.session_id, k)
            n += 1
    assert n > 500


# ------------------------------------------------------------------ metrics samples

def test_a_sample_that_leaves_decode_runs_whole_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Samples every simulated second: reading decode runs in place gives the same run
    folder as cutting every run at every sample."""
    sc = load_scenario(SCENARIOS / "quickstart.yaml")
    sc.server_metrics.interval_s = 1.0
    dirs = []
    for mode in ("peek", "cut"):
        if mode == "cut":
            def cut(self: TimerDriver, t: float) -> _Nothing:
                for i in range(len(self.runs)):
                    self.sync_one(i, t)
                return _Nothing()
            monkeypatch.setattr(TimerDriver, "sampled", cut)
        v = sc.model_copy(deep=True)
        v.output.dir, v.output.run_id = str(tmp_path), mode
        dirs.append(run(v, progress=False).run_dir)
    _same_run(*dirs)


def test_alone_sees_what_else_is_at_this_instant() -> None:
    """``VirtualEventLoop.alone``: False while another callback is ready or a timer is due
    at this nanosecond (cancelled or not), True when the next timer is later."""
    seen: list[tuple[str, bool]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualEventLoop)
        seen.append(("start", loop.alone()))
        h = loop.call_soon(lambda: None)
        seen.append(("ready", loop.alone()))
        await asyncio.sleep(0)  # ``h`` runs
        seen.append(("ran", loop.alone()))
        h = loop.call_at(loop.time(), lambda: None)
        seen.append(("due now", loop.alone()))
        h.cancel()
        seen.append(("cancelled, due now", loop.alone()))
        await asyncio.sleep(0)
        loop.call_at(loop.time() + 1e-9 * 2, lambda: None)
        seen.append(("due later", loop.alone()))
        await asyncio.sleep(1)

    run_on(VIRTUAL, main())
    assert seen == [("start", True), ("ready", False), ("ran", True), ("due now", False),
                    ("cancelled, due now", False), ("due later", True)]


def _shortcut_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              owner: type, name: str, variant: str) -> list[bool]:
    """Run ``pd-ratio.yaml``'s ``variant`` twice: with ``owner.name`` (a shortcut's test)
    as it is, and answering no every time; the two run folders must be the same. Returns
    the test's answers in the first run."""
    from agentbench.scenario.loading import expand_variants

    sc = next(v for v in expand_variants(load_scenario(SCENARIOS / "pd-ratio.yaml"))
              if v.name.endswith(variant))
    answers: list[bool] = []
    test = getattr(owner, name)

    def told(self: object) -> bool:
        answers.append(test(self))
        return answers[-1]

    dirs = []
    for mode in ("shortcut", "never"):
        monkeypatch.setattr(owner, name, told if mode == "shortcut" else lambda self: False)
        v = sc.model_copy(deep=True)
        v.output.dir, v.output.run_id = str(tmp_path), mode
        dirs.append(run(v, progress=False).run_dir)
    _same_run(*dirs)
    return answers


def test_a_sample_alone_at_its_instant_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample with nothing else at its instant is read at once, not three loop turns
    later (``replay.scrape``): the same run folder as waiting the turns out every time.
    This P/D variant also has samples that share their instant with other events (its two
    stages' ends), which wait the turns out as before."""
    answers = _shortcut_changes_nothing(tmp_path, monkeypatch, VirtualEventLoop, "alone",
                                        "agentx-p2d6")
    assert answers.count(True) > 80 and answers.count(False) >= 1, (
        answers.count(True), answers.count(False))


def test_a_finished_request_alone_at_its_instant_is_recorded_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request whose stream ended with nothing else at that instant is recorded at once
    instead of after a turn of the run's timers (``Timers.waited_now``): the same run
    folder as always waiting. This variant also ends several requests in one step, which
    wait their turns as before; a ``waited_now`` that always said yes gives another folder
    here."""
    from agentbench.replay.timers import Timers

    answers = _shortcut_changes_nothing(tmp_path, monkeypatch, Timers, "waited_now",
                                        "codex-agg")
    assert answers.count(True) > 1000 and answers.count(False) >= 10, (
        answers.count(True), answers.count(False))


def test_waited_now_leaves_the_timers_as_the_wait_would() -> None:
    """``Timers.waited_now``: no when another waiter is due at this instant or a callback
    is ready; yes when the next waiter is later, its timer armed anew at the same time
    (a wait re-arms it: its place among timers of that instant is the re-armed one's)."""
    from agentbench.replay.timers import Timers

    seen: list[object] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        timers = Timers(0, None, lambda: round(loop.time() * 1e9))
        later = asyncio.ensure_future(timers.wait_until(5_000_000_000))
        await asyncio.sleep(0)
        first = timers._handle
        assert first is not None
        seen.append(timers.waited_now())
        second = timers._handle
        seen.append(second is not first and first.cancelled())
        seen.append(second is not None and second.when() == first.when())
        loop.call_soon(lambda: None)
        seen.append(timers.waited_now())  # something else is ready
        await asyncio.sleep(0)
        now = asyncio.ensure_future(timers.wait_until(timers.now_ns(), pullable=False))
        await asyncio.sleep(0)  # its waiter is due at this instant, its timer armed
        seen.append(timers.waited_now())
        await now
        await later

    run_on(VIRTUAL, main())
    assert seen == [True, True, True, False, False]


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ------------------------------------------------------------------ decode runs, writer

@pytest.mark.parametrize("ns", [False, True])
def test_step_ends_in_numpy_are_python_s(ns: bool) -> None:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.uniform(1e-4, 5e-2, 300)) + rng.uniform(0, 5e4)
    as_list = [float(x) for x in times]
    for a, upto in ((0, 299), (17, 120), (200, 201)):
        got = decoderuns._ends(times, a, upto, ns)
        want = decoderuns._ends(as_list, a, upto, ns)
        assert list(got) == list(want) and len(got) == upto - a
        assert all(type(x) is (int if ns else float) for x in got)
        if ns:
            assert list(got) == [round(e * 1e9) for e in as_list[a + 1:upto + 1]]


def _row(i: int) -> dict[str, object]:
    row: dict[str, object] = {f.name: None for f in records.REQUESTS_SCHEMA}
    row.update(request_id=i, stage="s", phase="measure", endpoint="e", lane=0, tree_id="t",
               session_id="s", relation="root", copy=0, turn=i, scheduled_ns=i,
               expected_input_tokens=1, expected_output_tokens=1,
               potential_cached_tokens=0, status="ok", first_token_ns=None)
    return row


def test_a_virtual_run_s_writer_spools_rows_as_they_come(tmp_path: Path) -> None:
    """Without a flush loop, rows reach the spool every ``flush_every_rows`` rows (a
    count, whatever the wall clock says); with it unset they wait for a full batch."""
    for every, spooled in ((1, 5), (2, 4), (None, 0)):
        d = tmp_path / str(every)
        d.mkdir()
        w = ResultsWriter(d)
        w.flush_every_rows = every
        for i in range(5):
            w.add_request(_row(i))
        assert w._spools[records.REQUESTS_FILE].written == spooled
        w.close()
        assert w.kept == 5


def test_a_virtual_run_s_tables_have_the_same_bytes_whatever_the_wall_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A virtual-time run's parquet files are the same, byte for byte, however long it
    takes on the wall clock. The writer flushed its rows to the spool once a wall second,
    and where a table's batches end moves the pages of a large column (a long run's token
    events): a run of 16,707 requests wrote another requests.parquet each time, its rows
    the same. Here the second run's writer sees its clock jump 0.7 s at each look."""
    import hashlib

    from agentbench.results import writer as wmod

    sc_path = tmp_path / "s.yaml"
    sc_path.write_text(
        "name: s\nseed: 2\nendpoints: [{kind: simulated, instances: 4}]\n"
        "trace: {kind: synth, profile: codex, sessions: 16}\n"
        "load: {kind: lanes, concurrency: 16}\n"
        "limits: {max_requests: 2500, recycle: true}\n")
    digests = []
    for slow in (False, True):
        if slow:
            ticks = iter(range(10**9))
            monkeypatch.setattr(wmod.time, "monotonic",
                                lambda ticks=ticks: next(ticks) * 0.7)
        sc = load_scenario(sc_path)
        sc.output.dir = str(tmp_path / f"out-{slow}")
        res = run(sc, progress=False)
        digests.append({t: hashlib.sha256((res.run_dir / t).read_bytes()).hexdigest()
                        for t in (records.REQUESTS_FILE, records.SESSIONS_FILE,
                                  records.SERVER_METRICS_FILE)})
    assert digests[0] == digests[1]


def test_rows_with_compact_token_events_are_written_as_lists_would_be(tmp_path: Path) -> None:
    """The simulator's token events come as ``array.array``s: the journal line and the
    spooled batch are the ones plain lists give (None, empty and mixed rows included),
    and a journal left by a killed run reads back."""
    from array import array

    import orjson
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agentbench.results import writer as wmod
    from agentbench.results.spool import recover

    rng = random.Random(2)
    plain, compact = [], []
    for i in range(40):
        row = _row(i)
        kind = i % 4
        if kind == 0:
            ns, tok = None, None
        else:
            n = 0 if kind == 1 else rng.randrange(1, 300)
            ns = [rng.randrange(1 << 50) for _ in range(n)]
            tok = [rng.randrange(1, 4) for _ in range(n)]
        row.update(token_event_ns=ns, token_event_tokens=tok)
        plain.append(row)
        c = dict(row)
        if ns is not None and i % 8 != 3:  # some rows keep lists: a mixed batch
            c.update(token_event_ns=array("q", ns), token_event_tokens=array("i", tok))
        compact.append(c)
    assert any(isinstance(r["token_event_ns"], array) for r in compact)
    for a, b in zip(plain, compact, strict=True):
        assert orjson.dumps(b, default=wmod._as_numpy, option=orjson.OPT_SERIALIZE_NUMPY) \
            == orjson.dumps(a)
    want = pa.RecordBatch.from_pylist(plain, schema=records.REQUESTS_SCHEMA)
    only = [r for r in compact if r["token_event_ns"] is None
            or isinstance(r["token_event_ns"], array)]
    assert wmod._batch(only, records.REQUESTS_SCHEMA).equals(
        pa.RecordBatch.from_pylist([plain[r["request_id"]] for r in only],
                                   schema=records.REQUESTS_SCHEMA))
    assert wmod._batch(compact, records.REQUESTS_SCHEMA).equals(want)
    # a killed run: rows only in the journal (never spooled) are recovered whole
    w = ResultsWriter(tmp_path, flush_rows=10**6)
    for r in compact:
        w.add_request(r)
    for f in w._spools.values():  # as SIGKILL leaves them: nothing closed
        if f._journal is not None:
            import os
            os.close(f._journal)
            f._journal = None
    recover(tmp_path)
    assert pq.read_table(tmp_path / records.REQUESTS_FILE).to_pylist() == \
        pa.Table.from_batches([want]).to_pylist()


def test_on_request_rows_carry_lists_as_the_files_do(tmp_path: Path) -> None:
    """A library caller's ``on_request`` gets each row with its token events as lists
    (the simulator keeps them in arrays), equal to what requests.parquet holds."""
    import pyarrow.parquet as pq

    sc = load_scenario(SCENARIOS / "quickstart.yaml")
    sc.limits.max_requests = 20
    sc.output.dir = str(tmp_path)
    got: list[dict[str, object]] = []
    res = run(sc, progress=False, on_request=got.append)
    assert len(got) == 20
    assert all(type(r["token_event_ns"]) is list for r in got)
    on_disk = {r["request_id"]: r for r in pq.read_table(
        res.run_dir / records.REQUESTS_FILE).to_pylist()}
    for r in got:
        assert on_disk[r["request_id"]]["token_event_ns"] == r["token_event_ns"]
        assert on_disk[r["request_id"]]["token_event_tokens"] == r["token_event_tokens"]
