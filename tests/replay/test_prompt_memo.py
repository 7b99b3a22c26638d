"""Prompts remembered across a sweep's variants (``agentbench.prompts.memo``): a
remembered prompt is the one its builder would make, whatever turn a variant starts or
stops at, and a sweep's run folders are those of its variants run one by one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentbench.experiment.run import run_experiment
from agentbench.prompts.memo import BUILDER_BYTES, MemoPrompt, PromptMemo
from agentbench.prompts.segments import SegmentPrompt
from agentbench.replay import run
from agentbench.scenario.loading import expand_variants, load_scenario
from tests.helpers import SCENARIOS
from tests.replay.test_virtual_fast_paths import _session
from tests.replay.test_virtual_time import _same_run


@pytest.mark.parametrize("seed", range(12))
def test_a_remembered_prompt_is_the_one_its_builder_makes(seed: int) -> None:
    """Five variants replay three sessions through one memo, each from a random turn (a
    warm start) to a random turn (its deadline), now and then skipping a turn: every
    prompt equals a fresh builder's, and the last, sending the first's turns again,
    takes every one from the memo."""
    rng = random.Random(seed)
    bs, bsz = rng.choice([(4, 4), (8, 4), (4, 8), (16, 16)])
    chat, shared = rng.random() < 0.5, rng.choice([0, 0, 7])
    sessions = [(_session(rng, bs), (rng.randrange(1, 1 << 20), f"s{seed}-{i}",
                                     9 if chat else 0, shared, chat, bsz))
                for i in range(3)]
    memo = PromptMemo()
    ranges = []
    for variant in range(5):
        for i, (turns, args) in enumerate(sessions):
            builder = memo.wrap(SegmentPrompt(*args))
            assert isinstance(builder, MemoPrompt)
            first = rng.choice([0, 0, rng.randrange(len(turns))])
            last = rng.randrange(first, len(turns) + 1)
            if variant == 0:
                ranges.append((first, last))
            elif variant == 4:  # the first variant's turns again: each one remembered
                first, last = ranges[i]
            hits = memo.hits
            for k in range(first, last):
                if 0 < variant < 4 and rng.random() < 0.1:
                    continue  # a turn this variant does not send (a failed sibling)
                nxt = turns[k + 1] if k + 1 < len(turns) else None
                for _ in range(2 if k == first and variant < 4 else 1):  # the first
                    got = builder.build(turns[k], nxt)  # turn twice: the same prompt
                    want = SegmentPrompt(*args).build(turns[k], nxt)
                    assert (got.tokens, got.hashes) == (want.tokens, want.hashes)
            if variant == 4:
                assert memo.hits - hits == last - first


def test_a_memo_past_its_budget_remembers_nothing_more() -> None:
    rng = random.Random(3)
    turns = _session(rng, 16)
    memo = PromptMemo(budget_bytes=0)
    for _ in range(2):
        builder = memo.wrap(SegmentPrompt(5, "s", 0, 0, False, 16))
        for k, turn in enumerate(turns):
            nxt = turns[k + 1] if k + 1 < len(turns) else None
            assert builder.build(turn, nxt).hashes == \
                SegmentPrompt(5, "s", 0, 0, False, 16).build(turn, nxt).hashes
    assert memo.hits == 0 and memo.bytes == BUILDER_BYTES  # the session, not one turn


def test_a_sweep_gives_each_variant_s_own_run(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared-KV what-if's three variants, and a fourth with another seed (another
    trace), as one sweep: the first three share one memo (the fourth, alone on its trace,
    gets none), which the trace lets go after its last run; each run's folder is the one
    its variant gives run alone (no memo)."""
    from agentbench.replay import runsetup
    from agentbench.scenario.model import Variant

    made: list[PromptMemo] = []

    class Spy(PromptMemo):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(runsetup, "PromptMemo", Spy)
    sc = load_scenario(SCENARIOS / "shared-kv-what-if.yaml")
    sc.limits.max_requests = 200
    sc.variants.append(Variant(name="seed-1", set={"seed": 1}))
    sc.output.dir = str(tmp_path / "sweep")
    traces: dict = {}
    swept = run_experiment(sc, traces=traces)
    (memo,) = made
    assert memo.hits > memo.built  # variants 2 and 3 took their prompts from it
    assert len(traces) == 2 and all("prompts" not in t.memo for t in traces.values())
    for v, r in zip(expand_variants(sc), swept.runs, strict=True):
        v.output.dir = str(tmp_path / "alone")
        _same_run(r.run_dir, run(v, progress=False).run_dir)


def test_a_memo_counts_what_it_holds() -> None:
    """``PromptMemo.bytes`` against what its structures take (``tracemalloc``, which
    misses the tuples Python takes from its free list): never a quarter under, nor half
    over, for small blocks (many hashes a turn) and large (few)."""
    import tracemalloc

    for bs in (16, 256):
        rng = random.Random(bs)
        sessions = [_session(rng, bs) for _ in range(40)]
        tracemalloc.start()
        memo = PromptMemo()
        for i, turns in enumerate(sessions):
            builder = memo.wrap(SegmentPrompt(7, f"s{i}", 0, 0, False, bs))
            for k, turn in enumerate(turns):
                builder.build(turn, turns[k + 1] if k + 1 < len(turns) else None)
        del builder  # the last session's builder: the run's, not the memo's
        held = sum(st.size for st in tracemalloc.take_snapshot().statistics("filename")
                   if st.traceback[0].filename.endswith("memo.py"))
        tracemalloc.stop()
        assert 0.5 < held / memo.bytes < 1.25, (bs, held, memo.bytes)
