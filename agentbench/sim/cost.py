"""The simulator's step cost: how long one engine step of a simulated instance takes. The
scheduler (``engine.Instance.plan``), the decode runs computed ahead (``decoderuns``) and the
presets' summaries (``Preset.describe``) all ask this module; nothing else computes a
step's time.

Step time follows a roofline: a step that runs ``P`` prefill and ``D`` decode tokens costs

    compute_s = (P + D) * 2 * params * s_per_flop  +  attention_flops * s_per_flop
    memory_s  = (weight_bytes + kv_bytes_read) * s_per_byte
    step_s    = max(compute_s, memory_s) + step_overhead_s (+ tier loads of admitted requests)

where ``attention_flops`` is ``4 * layers * hidden`` per (query token, context token) pair,
so a prefill chunk of ``n`` tokens starting at position ``p`` (``p`` = tokens already
cached or computed) costs ``n * (p + n / 2)`` pairs: every cached token is paid for again
by attention, but far cheaper than recomputing it. Decode reads the weights once per step
plus every running sequence's KV, so TPOT grows with batch size and context. A step reads
the KV of every token it attends to: each decode sequence's context and each prefill
chunk's ``p + n``.
``s_per_flop = 1 / (peak_flops * mfu)``; ``s_per_byte = 1 / (hbm_bytes_per_s * mbu)``
(zero for an infinite peak or bandwidth: the ``instant`` preset).

Simulated runs are deterministic and compared bit for bit, so each expression below is
evaluated exactly as written, left to right: ``decode_flops`` + ``prefill_flops`` of each
chunk, in the scheduler's order, then ``step_s``. The decode helpers are those sums written
out for a decode-only step (``decode_step_s``) and for a run of them (``decode_durations``
in Python, ``fill_decode_durations`` elementwise in numpy), the same IEEE operations on the
same values. The presets' figures and their sources: ``presets.py``, docs/engines.md.

A preset fitted to a real engine (``agentbench sim fit``, docs/simulator.md) replaces the
roofline by the same terms summed with fitted coefficients (``FittedCost``):

    step_s = intercept_s + P * prefill_token_s + D * decode_token_s
             + attention_pairs * attention_pair_s + kv_tokens_read * kv_token_s

with the attention pairs and KV tokens read counted as above. ``step_cost`` picks the model
a preset asks for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from agentbench.sim.presets import Preset

#: memory time above compute time by this factor at a run's ends: above it at every step
MARGIN = 1.0 + 2.0 ** -30
#: integers up to this are exact in float64
EXACT = 1 << 53


def seconds_per_flop(peak_flops: float, mfu: float) -> float:
    """Seconds per FLOP at the achieved fraction ``mfu`` of ``peak_flops`` (0: infinite)."""
    return 0.0 if peak_flops == math.inf else 1.0 / (peak_flops * mfu)


def seconds_per_byte(hbm_bytes_per_s: float, mbu: float) -> float:
    """Seconds per HBM byte read at the achieved fraction ``mbu`` of the bandwidth."""
    return 0.0 if hbm_bytes_per_s == math.inf else 1.0 / (hbm_bytes_per_s * mbu)


class StepCost:
    """A preset's step-time model: ``lin`` FLOPs per token through the linear layers,
    ``attn`` FLOPs per (query, context) token pair, ``s_flop`` and ``s_byte`` seconds per
    FLOP and per byte read, ``kvb`` KV bytes per token, ``wb`` weight bytes read per step,
    ``overhead`` seconds added to every step. A mixture of experts reads its dense weights
    and the experts its step's tokens route to, and a model with sliding-window or linear
    layers reads each running sequence's constant KV (``seq_b``): ``weights``; ``varies``
    says whether the bytes read besides the context depend on the step's tokens."""

    __slots__ = ("lin", "dec", "attn", "s_flop", "s_byte", "kvb", "wb", "overhead",
                 "dense_wb", "ewb", "keep", "seq_b", "varies")

    def __init__(self, preset: Preset) -> None:
        self.lin = self.dec = 2.0 * preset.params
        self.attn = 4.0 * preset.layers * preset.hidden
        self.s_flop = seconds_per_flop(preset.peak_flops, preset.mfu)
        self.s_byte = seconds_per_byte(preset.hbm_bytes_per_s, preset.mbu)
        self.kvb = preset.kv_bytes_per_token
        self.wb = preset.weight_bytes
        self.overhead = preset.step_overhead_s
        moe = preset.routed_experts > 0 and preset.expert_weight_bytes > 0
        self.ewb = float(preset.expert_weight_bytes) if moe else 0.0
        self.dense_wb = self.wb - self.ewb
        #: the chance that one token leaves a given expert unused
        self.keep = 1.0 - preset.experts_per_token / preset.routed_experts if moe else 1.0
        self.seq_b = float(preset.sequence_kv_bytes)
        self.varies = bool(self.ewb or self.seq_b)

    def weights(self, tokens: int, seqs: int) -> float:
        """Bytes a step of ``tokens`` tokens over ``seqs`` sequences reads besides its
        tokens' context KV: the weights (a mixture of experts: its dense part, plus its
        experts x (1 - (1 - k/E) ** tokens), the share its tokens route to in expectation
        with uniform routing) and each sequence's constant KV. ``wb`` itself for a dense,
        full-attention model."""
        if not self.varies:
            return self.wb
        wb = self.dense_wb + self.ewb * (1.0 - self.keep ** tokens) if self.ewb else self.wb
        return wb + seqs * self.seq_b

    # ------------------------------------------------------------ one step

    def decode_flops(self, seqs: int, kv_tokens: int) -> float:
        """FLOPs of ``seqs`` decode tokens whose contexts hold ``kv_tokens`` in all."""
        return seqs * self.lin + kv_tokens * self.attn

    def prefill_flops(self, n: float, pos: float) -> float:
        """FLOPs of a prefill chunk of ``n`` tokens after ``pos`` tokens already present."""
        return n * self.lin + n * (pos + n / 2) * self.attn

    def step_s(self, flops: float, kv_tokens: float, tokens: int | None = None,
               seqs: int = 0) -> float:
        """A step of ``flops`` that reads the weights and ``kv_tokens`` tokens' KV: the
        slower of compute and memory, plus the per-step overhead (tier loads are the
        caller's, added after). ``tokens`` and ``seqs``: the step's tokens and sequences,
        when the bytes it reads depend on them (``varies``; None: all the weights)."""
        wb = self.wb if tokens is None else self.weights(tokens, seqs)
        return max(flops * self.s_flop, (wb + kv_tokens * self.kvb) * self.s_byte) \
            + self.overhead

    def decode_step_s(self, seqs: int, kv_tokens: int) -> float:
        """A decode-only step: ``step_s(decode_flops(seqs, kv_tokens), kv_tokens)``, written
        out (the scheduler's most frequent step)."""
        wb = self.weights(seqs, seqs) if self.varies else self.wb
        return max((seqs * self.lin + kv_tokens * self.attn) * self.s_flop,
                   (wb + kv_tokens * self.kvb) * self.s_byte) + self.overhead

    def kv_exact(self, kv_tokens: int) -> bool:
        """Whether ``kv_tokens * kvb`` is the same whether the token count is an int or a
        float (the scheduler counts a mixed step's KV tokens as a float): always for float
        KV bytes, below 2**53 for integer ones."""
        return not isinstance(self.kvb, int) or kv_tokens * self.kvb < EXACT

    # ------------------------------------------------------------ summaries

    def prefill_tokens_per_s(self, context: int, chunk: int = 8192) -> float:
        """Throughput of one prefill chunk of ``chunk`` tokens alone in a step, after
        ``context`` tokens already present."""
        t = self.step_s(self.prefill_flops(chunk, context), context + chunk, chunk, 1)
        return chunk / t if t > 0 else math.inf

    # ------------------------------------------------------------ decode runs

    def memory_bound(self, seqs: int, first: int, last: int) -> bool:
        """Whether every decode step of ``seqs`` sequences from ``first`` KV tokens to
        ``last`` (exclusive, by ``seqs``) is memory bound by a margin far above rounding:
        both terms are linear in the context, so it is when it is at the first and the
        last step (decode is, but for huge batches)."""
        lin_b, attn, s_flop = seqs * self.lin, self.attn, self.s_flop
        wb, kvb, s_byte = self.weights(seqs, seqs), self.kvb, self.s_byte
        c1 = last - seqs
        return (wb + first * kvb) * s_byte > (lin_b + first * attn) * s_flop * MARGIN \
            and (wb + c1 * kvb) * s_byte > (lin_b + c1 * attn) * s_flop * MARGIN

    def decode_durations(self, seqs: int, first: int, n: int) -> list[float]:
        """Durations of ``n`` decode steps of ``seqs`` sequences, the first at ``first`` KV
        tokens (step ``k``'s at ``first + k * seqs``): ``decode_step_s`` of each."""
        lin_b, attn, s_flop = seqs * self.lin, self.attn, self.s_flop
        wb, kvb, s_byte, over = self.weights(seqs, seqs), self.kvb, self.s_byte, self.overhead
        last = first + seqs * n
        if self.memory_bound(seqs, first, last):
            return [(wb + c * kvb) * s_byte + over for c in range(first, last, seqs)]
        # max(x, y) is y only when y > x
        return [(y if (y := (wb + c * kvb) * s_byte) > (x := (lin_b + c * attn) * s_flop)
                 else x) + over for c in range(first, last, seqs)]

    def fill_decode_durations(self, out: npt.NDArray[np.float64], seqs: int, first: int,
                              n: int) -> bool:
        """``decode_durations`` into ``out`` (``n`` float64s) with numpy, elementwise the
        same IEEE operations (``x + y`` is ``y + x``); False, ``out`` untouched, where
        float64 products would differ from Python's (an integer ``kvb`` times a context is
        an exact integer in Python, and in float64 only below 2**53)."""
        last = first + seqs * n
        kvb, wb = self.kvb, self.weights(seqs, seqs)
        if last >= EXACT or isinstance(kvb, int) and last * kvb >= EXACT:
            return False
        if isinstance(kvb, int) and float(wb).is_integer() and wb + last * kvb < EXACT:
            # wb + c * kvb is an integer below 2**53, exact in float64 however it is summed
            np.multiply(_index(n), seqs * kvb, out=out)
            out += wb + first * kvb
        else:
            np.multiply(np.arange(first, last, seqs, dtype=np.float64), kvb, out=out)
            out += wb
        out *= self.s_byte
        if not self.memory_bound(seqs, first, last):
            c = np.arange(first, last, seqs, dtype=np.float64)
            c *= self.attn
            c += seqs * self.lin
            c *= self.s_flop
            np.maximum(out, c, out=out)
        out += self.overhead
        return True


class FittedCost(StepCost):
    """The step-time model of a fitted preset: the roofline's terms summed, each with its
    coefficient in seconds (``Preset.step_fit``). The "FLOPs" the scheduler sums are the
    seconds of the per-token and attention terms; ``step_s`` adds the KV read and the
    intercept, in the order written (decode-only steps the same way, so ``decode_step_s``
    is ``step_s(decode_flops(...))`` bit for bit)."""

    __slots__ = ("kv_s",)

    def __init__(self, fit: StepFit) -> None:  # noqa: D107 - the fields are StepCost's
        self.lin = fit.prefill_token_s
        self.dec = fit.decode_token_s
        self.attn = fit.attention_pair_s
        self.kv_s = fit.kv_token_s
        self.overhead = fit.intercept_s
        self.s_flop = self.s_byte = 1.0
        self.kvb = self.wb = self.dense_wb = self.ewb = self.seq_b = 0.0
        self.keep = 1.0
        self.varies = False

    def decode_flops(self, seqs: int, kv_tokens: int) -> float:
        return seqs * self.dec + kv_tokens * self.attn

    def step_s(self, flops: float, kv_tokens: float, tokens: int | None = None,
               seqs: int = 0) -> float:
        return flops + kv_tokens * self.kv_s + self.overhead

    def decode_step_s(self, seqs: int, kv_tokens: int) -> float:
        return (seqs * self.dec + kv_tokens * self.attn) + kv_tokens * self.kv_s \
            + self.overhead

    def kv_exact(self, kv_tokens: int) -> bool:
        return kv_tokens < EXACT

    def memory_bound(self, seqs: int, first: int, last: int) -> bool:
        return False

    def decode_durations(self, seqs: int, first: int, n: int) -> list[float]:
        dec_b, attn, kv_s, over = seqs * self.dec, self.attn, self.kv_s, self.overhead
        return [(dec_b + c * attn) + c * kv_s + over
                for c in range(first, first + seqs * n, seqs)]

    def fill_decode_durations(self, out: npt.NDArray[np.float64], seqs: int, first: int,
                              n: int) -> bool:
        last = first + seqs * n
        if last >= EXACT:
            return False
        c = np.arange(first, last, seqs, dtype=np.float64)
        np.multiply(c, self.attn, out=out)
        out += seqs * self.dec  # x + y is y + x
        c *= self.kv_s
        out += c
        out += self.overhead
        return True


@dataclass(frozen=True)
class StepFit:
    """Coefficients of a fitted step-time model, seconds per unit (``FittedCost``)."""

    intercept_s: float
    prefill_token_s: float
    decode_token_s: float
    attention_pair_s: float
    kv_token_s: float
    #: seconds a request spends outside the steps before the engine schedules it (HTTP,
    #: tokenizing, an API server): its arrival at the instance is that much later
    request_s: float = 0.0

    def values(self) -> tuple[float, ...]:
        return tuple(getattr(self, k) for k in STEP_FIT_TERMS)


#: ``StepFit``'s coefficients, in the order of the model's terms (and of a preset file)
STEP_FIT_TERMS = ("intercept_s", "prefill_token_s", "decode_token_s", "attention_pair_s",
                  "kv_token_s", "request_s")


def step_cost(preset: Preset) -> StepCost:
    """The step-time model ``preset`` asks for: its fit when it has one, else the roofline."""
    fit = preset.step_fit
    return StepCost(preset) if fit is None else FittedCost(fit)


_INDEX = np.arange(1 << 10, dtype=np.float64)


def _index(n: int) -> npt.NDArray[np.float64]:
    """``0.0, 1.0, ..., n - 1`` (a view of a table grown as needed)."""
    global _INDEX
    if len(_INDEX) < n:
        _INDEX = np.arange(max(n, 2 * len(_INDEX)), dtype=np.float64)
    return _INDEX[:n]
