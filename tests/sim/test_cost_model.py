"""The simulator's step-cost model (``agentbench/sim/cost.py``) against step times worked
out by hand from the h200-llama3-70b figures, and the scheduler and the decode runs
against the model, bit for bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agentbench.sim import native
from agentbench.sim.cost import StepCost
from agentbench.sim.engine import Instance, SimRequest
from agentbench.sim.presets import PRESETS, get_preset

H200 = get_preset("h200-llama3-70b")
# h200-llama3-70b: params 70.6e9, 80 layers, hidden 8192, KV 163,840 B/token, weights
# 70.6e9 B, 1,979 TFLOP/s x mfu 0.55, 4.8 TB/s x mbu 0.75, 2 ms per step
FLOP_S = 1.979e15 * 0.55  # 1.08845e15 FLOP/s achieved
BYTE_S = 4.8e12 * 0.75  # 3.6e12 B/s achieved
LIN = 2 * 70.6e9  # 141.2e9 FLOPs per token through the linear layers
ATTN = 4 * 80 * 8192  # 2,621,440 FLOPs per (query, context) token pair


def test_decode_step_of_one_sequence_at_8k_tokens() -> None:
    # compute: 1 x 141.2e9 + 8,000 x 2,621,440 = 162.17152e9 FLOPs / 1.08845e15 = 0.149 ms
    # memory: 70.6e9 + 8,000 x 163,840 = 71.91072e9 B / 3.6e12 B/s = 19.9752 ms
    # step: max(0.149 ms, 19.9752 ms) + 2 ms = 21.9752 ms (~45.5 tok/s single stream)
    compute_s = 162.17152e9 / FLOP_S
    assert compute_s == pytest.approx(1.48994e-4, rel=1e-5)
    expected = 71.91072e9 / 3.6e12 + 0.002
    assert expected == pytest.approx(0.0219752, rel=1e-12)
    cost = StepCost(H200)
    assert cost.decode_step_s(1, 8000) == pytest.approx(expected, rel=1e-12)
    assert H200.decode_step_s(1, 8000) == cost.decode_step_s(1, 8000)
    # 256 sequences of 8,000 tokens: 2,048,000 KV tokens
    # compute: 256 x 141.2e9 + 2,048,000 x 2,621,440 = 41.51591e12 FLOPs / 1.08845e15
    #          = 38.14 ms
    # memory: 70.6e9 + 2,048,000 x 163,840 = 406.14432e9 B / 3.6e12 = 112.818 ms
    # step: 112.818 ms + 2 ms = 114.818 ms (still memory bound: TPOT grows with the batch)
    compute_s = (256 * LIN + 2_048_000 * ATTN) / FLOP_S
    assert compute_s == pytest.approx(0.0381422, rel=1e-5)
    assert cost.decode_step_s(256, 256 * 8000) == pytest.approx(406.14432e9 / 3.6e12 + 0.002,
                                                                rel=1e-12)
    assert cost.decode_step_s(256, 256 * 8000) == pytest.approx(0.1148179, rel=1e-6)


def test_cold_prefill_chunk_of_8192_tokens() -> None:
    # compute: 8,192 x 141.2e9 + 8,192 x (0 + 4,096) x 2,621,440
    #        = 1.1567104e15 + 8.796093e13 = 1.24467133e15 FLOPs / 1.08845e15 = 1.143527 s
    # memory: 70.6e9 + 8,192 x 163,840 = 71.942177e9 B / 3.6e12 = 19.98 ms (below compute)
    # step: 1.143527 s + 2 ms = 1.145527 s -> 8,192 / 1.145527 = ~7,151 tok/s
    flops = 8192 * LIN + 8192 * 4096 * ATTN
    assert flops == pytest.approx(1.24467133e15, rel=1e-8)
    cost = StepCost(H200)
    assert cost.prefill_flops(8192, 0) == flops
    step = flops / FLOP_S + 0.002
    assert cost.step_s(flops, 8192) == pytest.approx(step, rel=1e-12)
    assert cost.prefill_tokens_per_s(0) == pytest.approx(8192 / step, rel=1e-12)
    assert round(cost.prefill_tokens_per_s(0)) == 7151
    assert "prefill ~7,151 tok/s cold; single-stream decode ~46 tok/s" in H200.describe()


def test_scheduler_steps_are_the_models() -> None:
    """``Instance.plan``: a decode-only step and a mixed step (two decodes, one admitted
    prefill) cost what the model says, worked out here by hand."""
    inst = Instance(0, H200, 16, 10_000)
    a = SimRequest(rid=0, prompt_tokens=7_999, hashes=[], output_tokens=50)
    a.generated = 1  # context 8,000
    inst.decoding = [a]
    inst._decode_ctx = 8_000
    assert inst.plan(0.0) == 71.91072e9 * (1 / BYTE_S) + 0.002
    inst.commit(1.0)  # a's context is now 8,001
    b = SimRequest(rid=1, prompt_tokens=11_999, hashes=[], output_tokens=50)
    b.generated = 1
    inst.decoding = [a, b]
    inst._decode_ctx = 8_001 + 12_000
    inst.add(SimRequest(rid=2, prompt_tokens=1_000, hashes=[], output_tokens=5))
    # decodes: 2 tokens over 20,001 KV tokens; prefill: 1,000 tokens from position 0
    # compute: 2 x 141.2e9 + 20,001 x 2,621,440 + 1,000 x 141.2e9 + 1,000 x 500 x 2,621,440
    #        = 282.4e9 + 52.43145e9 + 141.2e12 + 1.31072e12 = 142.84555e12 FLOPs
    #        / 1.08845e15 = 131.2376 ms (the max: a prefill step is compute bound)
    # memory: 70.6e9 + (20,001 + 1,000) x 163,840 = 74.04080384e9 B / 3.6e12 = 20.567 ms
    # step: 131.2376 ms + 2 ms = 133.2376 ms
    flops = 2 * LIN + 20_001 * ATTN + (1_000 * LIN + 1_000 * 500 * ATTN)
    assert flops == pytest.approx(142.84555e12, rel=1e-7)
    mem = 70.6e9 + 21_001 * 163_840
    assert mem == 74.04080384e9
    dur = inst.plan(1.0)
    assert dur == max(flops * (1 / FLOP_S), mem * (1 / BYTE_S)) + 0.002
    assert dur == pytest.approx(0.1332376, rel=1e-6)
    cost = inst.cost
    assert dur == cost.step_s(cost.decode_flops(2, 20_001) + cost.prefill_flops(1_000, 0),
                              21_001.0) + 0.0


def test_instant_preset_costs_nothing() -> None:
    cost = StepCost(PRESETS["instant"])
    assert cost.s_flop == cost.s_byte == 0.0
    assert cost.decode_step_s(1000, 10**7) == 0.0
    assert cost.step_s(cost.prefill_flops(10**6, 10**6), 2 * 10**6) == 0.0
    assert cost.prefill_tokens_per_s(0) == float("inf")


@pytest.mark.parametrize("preset", [H200, PRESETS["h100-llama3-8b"], PRESETS["instant"],
                                    replace(H200, weight_bytes=7.06e10 + 0.37,
                                            kv_bytes_per_token=163840.5)],
                         ids=["h200", "h100", "instant", "non-integer-bytes"])
@pytest.mark.parametrize("seqs,first", [(1, 1000), (3, 20_000), (256, 300_000),
                                        (256, 3_000_000)])
def test_decode_durations_are_decode_steps_bit_for_bit(preset: object, seqs: int,
                                                       first: int) -> None:
    """A run's durations, in Python and elementwise in numpy, are ``decode_step_s`` of each
    step, memory- and compute-bound alike."""
    cost = StepCost(preset)  # type: ignore[arg-type]
    n = 300
    steps = [cost.decode_step_s(seqs, first + k * seqs) for k in range(n)]
    assert cost.decode_durations(seqs, first, n) == steps
    out = np.empty(n)
    assert cost.fill_decode_durations(out, seqs, first, n)
    assert out.tolist() == steps


@pytest.mark.skipif(native.compiled(), reason="kvb is a C double in the compiled engine: "
                    "an integer's exactness is not kept (AGENTBENCH_NATIVE)")
def test_kv_exact_and_numpy_refusal_beyond_2_53() -> None:
    cost = StepCost(H200)  # integer KV bytes: exact as a float below 2**53 only
    assert cost.kv_exact(10**9) and not cost.kv_exact(2**53 // 163_840 + 1)
    assert StepCost(PRESETS["instant"]).kv_exact(2**60)  # float KV bytes: always
    out = np.full(50, -1.0)
    assert not cost.fill_decode_durations(out, 4, 2**53 // 163_840, 50)
    assert (out == -1.0).all()  # untouched: the run falls back to Python
