"""Fitted presets (``step_model`` in a preset file, ``cost.FittedCost``): the file format and
its errors, the step times it gives, bit-identical decode runs, and a run on one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from agentbench.errors import InputError
from agentbench.sim.cost import FittedCost, StepFit, step_cost
from agentbench.sim.presetfile import parse_preset, preset_yaml
from agentbench.sim.presets import PRESETS
from tests.sim.test_preset_files import _ttft_sum, _virtual_run

FIT = StepFit(intercept_s=0.004, prefill_token_s=2e-5, decode_token_s=3e-4,
              attention_pair_s=1.5e-9, kv_token_s=2e-7)

TEXT = """\
format: 1
name: tiny-cpu
summary: a fitted test preset
provenance: {engine: llama.cpp, engine_version: "b1", model: tiny, hardware: 2 cores,
             date: 2026-12-01, sources: [runs/a]}
scheduler: paged
figures:
  max_num_batched_tokens: {value: 2048, source: engine setting}
  max_num_seqs: {value: 4, source: engine setting}
  cpu_load_s_per_token: {value: 0.0, source: none}
  shared_load_s_per_token: {value: 0.0, source: none}
  natural_output_tokens: {value: 64, source: assumption}
  kv_capacity_tokens: {value: 24576, source: the server's n_ctx}
step_model:
  intercept_s: {value: 0.004, source: fitted}
  prefill_token_s: {value: 2.0e-5, source: fitted}
  decode_token_s: {value: 3.0e-4, source: fitted}
  attention_pair_s: {value: 1.5e-9, source: fitted}
  kv_token_s: {value: 2.0e-7, source: fitted}
  fit:
    method: nnls
    observations: 10
    inputs: [runs/a]
    residuals: {ttft_median: 0.05}
"""


def test_a_fitted_preset_reads_and_round_trips() -> None:
    p = parse_preset(TEXT)
    assert p.step_fit == FIT and p.scheduler == "paged"
    assert p.cache_tokens() == 24576 and p.cache_blocks(16) == 24576 // 16
    assert p.fit_summary == {"method": "nnls", "observations": 10, "inputs": ["runs/a"],
                             "residuals": {"ttft_median": 0.05}}
    again = parse_preset(preset_yaml(p))
    assert again == p and again.fit_summary == p.fit_summary
    assert dict(again.provenance.figures)["prefill_token_s"] == "fitted"
    assert "fitted step model" in p.describe()


@pytest.mark.parametrize("edit,key,words", [
    (("  kv_capacity_tokens: {value: 24576, source: the server's n_ctx}\n", ""),
     "figures.kv_capacity_tokens", "missing"),
    (("  natural_output_tokens:", "  mfu: {value: 0.5, source: x}\n  natural_output_tokens:"),
     "figures.mfu", "not read by a fitted preset"),
    (("prefill_token_s: {value: 2.0e-5", "prefill_token_s: {value: -2.0e-5"),
     "step_model.prefill_token_s.value", "greater than or equal to 0"),
    (("scheduler: paged", "scheduler: slot"), "scheduler", "paged"),
    (("    observations: 10\n", ""), "step_model.fit.observations", "missing"),
])
def test_a_bad_fitted_preset_is_one_line_naming_the_key(edit: tuple[str, str], key: str,
                                                         words: str) -> None:
    assert edit[0] in TEXT
    with pytest.raises(InputError) as e:
        parse_preset(TEXT.replace(*edit), "p.yaml")
    line = e.value.one_line()
    assert key in line and words in line and "\n" not in line, line


def test_a_roofline_preset_without_its_figures_is_refused() -> None:
    data = yaml.safe_load(preset_yaml(PRESETS["h100-llama3-8b"]))
    del data["figures"]["mfu"]
    with pytest.raises(InputError) as e:
        parse_preset(yaml.safe_dump(data), "p.yaml")
    assert "figures.mfu" in e.value.one_line() and "missing" in e.value.one_line()


def test_the_fitted_step_time_is_the_sum_of_its_terms() -> None:
    c = FittedCost(FIT)
    # 3 decodes over 3,000 context tokens and a 500-token chunk after 1,000 cached
    flops = c.decode_flops(3, 3000) + c.prefill_flops(500, 1000)
    kv = 3000 + 1000 + 500
    want = (0.004 + 500 * 2e-5 + 3 * 3e-4 + (3000 + 500 * 1250) * 1.5e-9 + kv * 2e-7)
    assert c.step_s(flops, kv) == pytest.approx(want, rel=1e-12)
    assert c.decode_step_s(3, 3000) == c.step_s(c.decode_flops(3, 3000), 3000)
    assert step_cost(parse_preset(TEXT)).decode_step_s(2, 10) == c.decode_step_s(2, 10)
    assert type(step_cost(PRESETS["h100-llama3-8b"])) is not FittedCost


@pytest.mark.parametrize("seqs,first,n", [(1, 0, 50), (3, 1234, 200), (7, 10**6, 64)])
def test_fitted_decode_runs_are_the_steps_bit_for_bit(seqs: int, first: int, n: int) -> None:
    c = FittedCost(FIT)
    one = [c.decode_step_s(seqs, first + k * seqs) for k in range(n)]
    assert c.decode_durations(seqs, first, n) == one
    out = np.empty(n)
    assert c.fill_decode_durations(out, seqs, first, n)
    assert out.tolist() == one


def test_a_run_on_a_fitted_preset_is_deterministic_and_follows_its_fit(tmp_path: Path
                                                                      ) -> None:
    text = TEXT.replace("value: 24576", "value: 4000000")  # room for the trace's prompts
    fast, slow = tmp_path / "fast.yaml", tmp_path / "slow.yaml"
    fast.write_text(text)
    slow.write_text(text.replace("prefill_token_s: {value: 2.0e-5",
                                 "prefill_token_s: {value: 2.0e-4"))
    a, b, s = (pq.read_table(_virtual_run(tmp_path / "out", rid, str(p)) / "requests.parquet")
               for rid, p in (("a", fast), ("b", fast), ("s", slow)))
    assert a.num_rows > 5 and set(a.column("status").to_pylist()) == {"ok"}
    assert a.drop(["request_id"]).equals(b.drop(["request_id"]))
    assert _ttft_sum(s) > 2 * _ttft_sum(a) > 0


def test_request_s_delays_each_request_by_that_much(tmp_path: Path) -> None:
    """A fitted preset's time outside the steps (HTTP, tokenizing) comes before the engine
    sees the request: with one lane of an agent without subagents (the codex profile)
    nothing else moves, so every first token is exactly that much later."""
    text = TEXT.replace("value: 24576", "value: 4000000")
    plain, slow = tmp_path / "plain.yaml", tmp_path / "slow.yaml"
    plain.write_text(text)
    slow.write_text(text.replace("  kv_token_s: {value: 2.0e-7, source: fitted}\n",
                                 "  kv_token_s: {value: 2.0e-7, source: fitted}\n"
                                 "  request_s: {value: 0.05, source: fitted}\n"))
    assert parse_preset(slow.read_text()).step_fit.request_s == 0.05  # type: ignore[union-attr]
    a, b = (pq.read_table(_virtual_run(tmp_path / "out", rid, str(p), agents=1,
                                       max_context=8000, time_scale=0.0,
                                       profile="codex")
                          / "requests.parquet") for rid, p in (("a", plain), ("b", slow)))
    ttft = [[f - s for f, s in zip(t.column("first_token_ns").to_pylist(),
                                   t.column("sent_ns").to_pylist(), strict=True)]
            for t in (a, b)]
    assert len(ttft[0]) > 5
    assert all(abs(y - x - 50_000_000) <= 1 for x, y in zip(*ttft, strict=True)), ttft


@pytest.mark.parametrize("name,scheduler", [("llama-cpp-tiny", "slots"),
                                            ("vllm-cpu-tiny", "paged")])
def test_the_shipped_fitted_presets_read(name: str, scheduler: str) -> None:
    """scenarios/presets/: fitted to the two CPU engines (docs/simulator.md), each with its
    fit's inputs and residuals."""
    from agentbench.sim.presetfile import load_preset_file
    from tests.helpers import SCENARIOS

    p = load_preset_file(SCENARIOS / "presets" / f"{name}.yaml")
    assert p.name == name and p.scheduler == scheduler and p.step_fit is not None
    assert p.fit_summary and p.fit_summary["observations"] > 50
    assert p.fit_summary["residuals"]["ttft_median"] < 0.1
    assert all(v >= 0 for v in p.step_fit.values()) and p.step_fit.intercept_s > 0
    assert p.provenance.engine_version and "docs/simulator.md" in " ".join(p.provenance.notes)


def test_a_step_model_beyond_a_second_per_unit_is_refused(tmp_path: Path) -> None:
    """(it would stretch a simulated run, and its metrics, without bound)"""
    with pytest.raises(InputError) as e:
        parse_preset(TEXT.replace("decode_token_s: {value: 3.0e-4",
                                  "decode_token_s: {value: 1.0e+3"), "p.yaml")
    assert "step_model.decode_token_s" in e.value.one_line()
    fifo = tmp_path / "p.yaml"
    import os

    os.mkfifo(fifo)
    from agentbench.sim.presetfile import load_preset_file

    with pytest.raises(InputError, match="not a regular file"):
        load_preset_file(fifo)
