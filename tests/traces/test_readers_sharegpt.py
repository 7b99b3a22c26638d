"""ShareGPT reader: text -> tokens -> prefix-chained hash ids; drawn think time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import detect_format, read_trace
from agentbench.traces.readers._text import (
    PromptHasher,
    codex_delay_fit,
    draw_think_times,
    lognormal_fit,
)
from agentbench.traces.stats import potential_cached_tokens
from agentbench.traces.words import chat_prompt_tokens, count_tokens

FUZZ = Path(__file__).resolve().parent.parent / "fuzz" / "traces"
SYSTEM = "You are a coding agent working in a repository. " * 30
CONV = [
    {"from": "system", "value": SYSTEM},
    {"from": "human", "value": "Fix the failing test in tests/test_io.py."},
    {"from": "gpt", "value": "I will read the test file first."},
    {"from": "human", "value": "def test_read():\n    assert read('x') == 'y'\n" * 20},
    {"from": "gpt", "value": "The reader strips the newline; I will patch it."},
    {"from": "human", "value": "ok"},
    {"from": "gpt", "value": "Done."},
]


def write(tmp_path: Path, data: object, name: str = "codex.json") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(data))
    return f


def test_turns_inputs_outputs_and_prefix_sharing(tmp_path: Path) -> None:
    f = write(tmp_path, [{"id": "trial-1", "conversations": CONV}])
    assert detect_format(f) == "sharegpt"
    tr = read_trace(f)
    (s,) = tr.sessions
    assert s.session_id == "trial-1" and len(s.turns) == 3
    texts = [m["value"] for m in CONV]
    # input = chat template over every message before the reply
    assert [t.input_tokens for t in s.turns] == [
        chat_prompt_tokens(texts[:2]), chat_prompt_tokens(texts[:4]),
        chat_prompt_tokens(texts[:6])]
    assert [t.output_tokens for t in s.turns] == [count_tokens(texts[i]) for i in (2, 4, 6)]
    # each prompt extends the previous: all its full blocks are shared by the next turn
    a, b, c = s.turns
    assert np.array_equal(b.hash_ids[: a.input_tokens // 64], a.hash_ids[: a.input_tokens // 64])
    pot = potential_cached_tokens(tr.sessions)
    assert pot[("trial-1", 1)] == (a.input_tokens // 64) * 64
    assert pot[("trial-1", 2)] == (b.input_tokens // 64) * 64


def test_equal_prefixes_give_equal_ids_across_conversations(tmp_path: Path) -> None:
    other = [CONV[0], {"from": "human", "value": "Something else entirely."},
             {"from": "gpt", "value": "Sure."}]
    f = write(tmp_path, [{"conversations": CONV}, {"conversations": other}], "x.jsonl")
    f.write_text("\n".join(json.dumps(r) for r in [{"conversations": CONV},
                                                  {"conversations": other}]))
    tr = read_trace(f, format="sharegpt")
    first, second = tr.sessions[0].turns[0], tr.sessions[1].turns[0]
    shared = chat_prompt_tokens([SYSTEM]) // 64  # blocks inside the common system prompt
    assert shared >= 3
    assert np.array_equal(first.hash_ids[:shared], second.hash_ids[:shared])
    assert first.hash_ids[shared] != second.hash_ids[shared]  # holds the first difference
    assert len({s.scope for s in tr.sessions}) == 1  # content hashes: one scope


def test_prompt_hasher_ids_depend_on_all_tokens_before() -> None:
    h = PromptHasher(4)
    a = h.hash_ids([1, 2, 3, 4, 5, 6, 7, 8, 9])
    b = PromptHasher(4).hash_ids([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    c = PromptHasher(4).hash_ids([0, 2, 3, 4, 5, 6, 7, 8])
    assert len(a) == 3 and a[:2].tolist() == b[:2].tolist()
    assert a[2] != b[2]  # a partial block differs from a longer one
    assert not set(a.tolist()) & set(c.tolist())  # one changed token changes every id after
    # incremental reuse gives the same ids as hashing from scratch
    assert h.hash_ids([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).tolist() == b.tolist()


def test_think_time_is_seeded(tmp_path: Path) -> None:
    f = write(tmp_path, [{"conversations": CONV}])
    a = [t.think_s for t in read_trace(f).sessions[0].turns]
    b = [t.think_s for t in read_trace(f, seed=0).sessions[0].turns]
    c = [t.think_s for t in read_trace(f, seed=1).sessions[0].turns]
    assert a == b != c and a[0] == 0.0 and all(x > 0 for x in a[1:])
    turns = read_trace(f).sessions[0].turns
    assert turns[2].t == pytest.approx(a[1] + a[2])


def test_drawn_think_times_follow_the_published_codex_quantiles() -> None:
    """Published: median 5.2 s, p90 23.0 s, p99 81.4 s. The log-normal fit (median exact,
    sigma by least squares in log space) gives p90 23.5 s and p99 80.4 s."""
    mu, sigma = codex_delay_fit()
    assert np.exp(mu) == pytest.approx(5.2)
    draws = draw_think_times(np.random.default_rng(7), 400_000)
    q50, q90, q99 = np.percentile(draws, [50, 90, 99])
    assert q50 == pytest.approx(5.2, rel=0.03)
    assert q90 == pytest.approx(23.0, rel=0.05)
    assert q99 == pytest.approx(81.4, rel=0.05)


def test_lognormal_fit_recovers_exact_quantiles() -> None:
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    q = {p: float(np.exp(1.0 + 0.7 * z(p))) for p in (0.5, 0.9, 0.99)}
    mu, sigma = lognormal_fit(q)
    assert (mu, sigma) == (pytest.approx(1.0), pytest.approx(0.7))


def test_exact_tokenizer_option(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator([m["value"] for m in CONV], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["[UNK]"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    f = write(tmp_path, [{"conversations": CONV}])
    (s,) = read_trace(f, tokenizer=str(path)).sessions

    def n(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    assert s.turns[0].input_tokens == 1 + (2 + n(CONV[0]["value"])) + (2 + n(CONV[1]["value"]))
    assert s.turns[0].output_tokens == n(CONV[2]["value"])


@pytest.mark.parametrize("record, field", [
    ({"id": 1}, "conversations"),
    ({"conversations": "text"}, "conversations"),
    ({"conversations": [{"from": "human"}]}, "conversations[0].value"),
    ({"conversations": [{"value": "hi"}]}, "conversations[0].from"),
])
def test_bad_records_name_record_and_field(tmp_path: Path, record: dict, field: str) -> None:
    f = write(tmp_path, [{"conversations": CONV}, record])
    with pytest.raises(InputError) as e:
        read_trace(f, format="sharegpt")
    assert (e.value.source, e.value.where, e.value.field) == (str(f), "record 1", field)


@pytest.mark.parametrize("seed", ["nan", "1.5", "abc", "-1", "[1]", "true", str(2**70)])
def test_a_seed_option_that_is_no_seed_is_one_line(seed: str) -> None:
    """``traces stats t.json -O seed=1.5`` (or ``trace.options.seed: 1.5`` in a scenario):
    numpy's refusal was a TypeError traceback for nan, 1.5 and abc, 'cannot read it:
    ValueError' for -1; a list, a boolean and 2**70 were taken. One line naming seed."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    res = CliRunner().invoke(app, ["traces", "stats", str(FUZZ / "valid-sharegpt.json"),
                                   "-O", f"seed={seed}"])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "field 'seed': expected an integer from 0 to 2**63-1" in res.output
