"""Mixture-of-experts weight reads and per-sequence KV (sliding windows) in the step-cost
model (``sim/cost.py``), against hand-computed figures, and the decode runs that advance
such presets many steps at a time against stepping them one at a time."""

from __future__ import annotations

import numpy as np
import pytest

from agentbench.errors import InputError
from agentbench.sim.cost import step_cost
from agentbench.sim.engine import Instance, SimRequest
from agentbench.sim.presetfile import parse_preset
from agentbench.sim.presets import BUILTIN, PRESET_DIR, get_preset
from agentbench.sim.virtual import run_virtual
from tests.sim.test_sim_virtual_runs import WORKLOADS, _build, _results, step_by_step

DS = get_preset("h200x8-deepseek-v3")
OSS = get_preset("h200-gpt-oss-120b")


def test_a_dense_preset_reads_every_weight_once_per_step() -> None:
    for name in ("h200-llama3-70b", "h100-llama3-8b"):
        c = step_cost(get_preset(name))
        assert not c.varies
        assert c.weights(1, 1) == c.weights(10_000, 64) == c.wb


def test_an_moe_step_reads_the_experts_its_tokens_route_to() -> None:
    c = step_cost(DS)
    dense = 671e9 - 653_908_770_816
    # one token: 8 of 256 experts per layer
    assert c.weights(1, 1) == pytest.approx(dense + 653_908_770_816 * 8 / 256, rel=1e-12)
    # two tokens: 1 - (248/256)^2 of them, in expectation
    assert c.weights(2, 2) == pytest.approx(
        dense + 653_908_770_816 * (1 - (248 / 256) ** 2), rel=1e-12)
    # a 512-token batch touches all but (248/256)^512, about 1e-7, of them
    assert c.weights(512, 512) == pytest.approx(671e9, rel=1e-6)
    # a single-stream decode step at 8K context: memory bound, by hand
    mem = (dense + 653_908_770_816 / 32 + 8_000 * 35_136) / (8 * 4.8e12 * 0.7)
    flops = (2 * 37e9 + 8_000 * 4 * 61 * 20_480) / (8 * 1.979e15 * 0.4)
    assert mem > flops
    assert c.decode_step_s(1, 8_000) == pytest.approx(mem + 0.003, rel=1e-12)
    # batching amortizes: 64 sequences read far more experts, far less per sequence
    assert c.decode_step_s(64, 64 * 8_000) / 64 < c.decode_step_s(1, 8_000) / 8


def test_a_sliding_window_model_reserves_and_reads_its_windows() -> None:
    c = step_cost(OSS)
    assert c.varies and c.ewb == 60.91e9
    window = 18 * 128 * 8 * 64 * 2 * 2  # 4.72 MB
    assert OSS.sequence_kv_bytes == window
    # a decode step of 10 sequences reads their windows beside their full layers' KV
    assert c.weights(10, 10) == pytest.approx(
        65.19e9 - 60.91e9 + 60.91e9 * (1 - (124 / 128) ** 10) + 10 * window, rel=1e-12)
    inst = Instance(0, OSS, 16, 10_000)
    # 4.72 MB over 36,864 bytes x 16 tokens a block: 8 blocks a running request
    assert inst.seq_blocks == 8
    req = SimRequest(rid=1, prompt_tokens=1000, hashes=[], output_tokens=100)
    assert inst.blocks_needed(req) == -(-1100 // 16) + 8
    # the KV capacity counts full-attention layers' bytes only
    assert OSS.cache_tokens() == int((141e9 * 0.9 - 65.19e9 - 5e9) // 36_864)


@pytest.mark.parametrize("preset", ["h200x8-deepseek-v3", "h200-gpt-oss-120b"])
def test_decode_runs_are_the_steps_one_by_one(preset: str) -> None:
    c = step_cost(get_preset(preset))
    for seqs, first, n in ((1, 1_000, 50), (7, 200_000, 45), (60, 3_000_000, 80)):
        one = [c.decode_step_s(seqs, first + k * seqs) for k in range(n)]
        assert c.decode_durations(seqs, first, n) == one
        out = np.empty(n)
        assert c.fill_decode_durations(out, seqs, first, n)
        assert out.tolist() == one


@pytest.mark.parametrize("preset", ["h200x8-deepseek-v3", "h200-gpt-oss-120b"])
@pytest.mark.parametrize("name", ["agentic", "thrash"])
def test_run_virtual_matches_stepping_for_moe_presets(preset: str, name: str) -> None:
    cl, sched = _build(**{**WORKLOADS[name], "preset": preset})  # type: ignore[arg-type]
    new = _results(cl, run_virtual(cl, sched))
    cl, sched = _build(**{**WORKLOADS[name], "preset": preset})  # type: ignore[arg-type]
    assert new == _results(cl, step_by_step(cl, sched))


def _file(**figures: object) -> str:
    text = (PRESET_DIR / "h200x8-deepseek-v3.yaml").read_text()
    for k, v in figures.items():
        head = f"  {k}:\n    value: "
        at = text.index(head) + len(head)
        end = text.index("\n", at)
        text = text[:at] + str(v) + text[end:] if v is not None else \
            text[:text.index(head)] + text[text.index("\n    source:", at):].split(
                "\n", 2)[2]
    return text


def test_a_preset_file_gives_all_three_moe_figures_or_none() -> None:
    assert "h200x8-deepseek-v3" in BUILTIN
    with pytest.raises(InputError, match="'figures.experts_per_token': missing"):
        parse_preset(_file(experts_per_token=None), "p.yaml")
    with pytest.raises(InputError, match="experts_per_token': more than routed_experts"):
        parse_preset(_file(experts_per_token=300), "p.yaml")
    with pytest.raises(InputError, match="expert_weight_bytes': more than weight_bytes"):
        parse_preset(_file(expert_weight_bytes=7.0e11), "p.yaml")
    assert parse_preset(_file(), "p.yaml") == DS


def test_a_window_larger_than_the_kv_cache_is_refused() -> None:
    text = (PRESET_DIR / "h200-gpt-oss-120b.yaml").read_text().replace(
        "value: 4718592", "value: 2.0e+12")
    with pytest.raises(InputError, match="sequence_kv_bytes': 2,000,000,000,000 bytes a "
                                         "sequence: not less than the whole KV cache"):
        parse_preset(text, "p.yaml")
