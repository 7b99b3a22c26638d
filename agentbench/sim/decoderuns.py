"""Decode runs: an instance's next steps computed ahead when they are certain, so that a
virtual-time driver advances it many steps at a time with the records of stepping it one
step at a time.

When nothing prefills, every decode fits the token budget and nothing waiting can be
admitted until a request gives its blocks or its slot back (``queue_stuck``), each step is
a decode step of the same batch until one of its requests finishes: the steps' durations
are ``Instance.plan``'s, bit for bit (both ask the step-cost model, ``cost.StepCost``: its
``decode_durations`` and ``fill_decode_durations`` compute a run's in Python or elementwise
in numpy), their ends and the instance's busy time are summed one step at a time as
stepping does, and nothing outside the instance sees them (its load and its caches do not
change, so routing does not either). Only an arrival routed to it, an abort or a read of
its state can change its course; a driver then cuts the run there (``cut``): the steps
ended are committed in bulk (``apply``) and the step in progress is planned as it was at
its start. A run ends at the step that finishes a request, which is planned and committed
as usual (``last_step``).
"""

from __future__ import annotations

import bisect
from array import array
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from agentbench.sim.engine import Instance


#: runs at least this long compute their steps with numpy (the same IEEE operations,
#: elementwise, and cumulative sums one addition at a time)
NUMPY_STEPS = 40

Floats = list[float] | npt.NDArray[np.float64]


class DecodeRun:
    """Steps ``1..K`` planned ahead: ``times[k]`` is step ``k``'s end (``times[0]`` the
    run's start) and ``busy[k]`` the instance's ``stats.busy_s`` once it is committed
    (``busy[0]`` before the run), each the previous plus step ``k``'s duration, added one
    step at a time as ``plan`` does (lists or float64 arrays); ``end``: ``times[K]``;
    ``finishes``: whether step ``K`` finishes a request; ``applied``: steps committed."""

    __slots__ = ("times", "busy", "steps", "end", "finishes", "applied")

    def __init__(self, times: Floats, busy: Floats, finishes: bool) -> None:
        self.times = times
        self.busy = busy
        self.steps = len(times) - 1
        self.end = float(times[-1])
        self.finishes = finishes
        self.applied = 0


def queue_stuck(inst: Instance) -> bool:
    """Nothing waiting can be admitted until a request gives its blocks or its slot back:
    the queue is empty, the sequence slots are full, or the head failed admission and
    nothing was released since (then ``plan`` makes pure decode steps, with the same
    duration as its decode-only path)."""
    if not inst.waiting:
        return True
    if len(inst.decoding) + len(inst.prefilling) >= inst.preset.max_num_seqs:
        return True
    b = inst._blocked
    return b is not None and b[0] is inst.waiting[0] and b[1] == inst._releases


def decode_run(inst: Instance, start: float, max_steps: int) -> DecodeRun | None:
    """The steps from ``start`` that are certain now (at most ``max_steps``, up to the first
    that finishes a request); None when fewer than two are."""
    if inst._dirty:
        inst._purge()
    dec = inst.decoding
    if inst.prefilling or not dec or len(dec) > inst.preset.max_num_batched_tokens \
            or inst.waiting and not queue_stuck(inst):
        return None
    left = min([r.output_tokens - r.generated for r in dec])
    n = left if left <= max_steps else max_steps
    if n < 2:
        return None
    if inst.waiting and not inst.cost.kv_exact(inst._decode_ctx + len(dec) * n):
        return None  # plan() with a queue reads the KV tokens as a float: the same below
    busy = inst.stats.busy_s
    rows = _steps(inst, len(dec), inst._decode_ctx, n, start, busy)
    if rows is not None:
        return DecodeRun(rows[0], rows[1], n == left)
    durs = inst.cost.decode_durations(len(dec), inst._decode_ctx, n)
    return DecodeRun(list(accumulate(durs, initial=start)),
                     list(accumulate(durs, initial=busy)), n == left)


def _steps(inst: Instance, b: int, ctx: int, n: int, start: float,
           busy: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """The step durations' running sums from ``start`` and from ``busy`` (``[start, end 1,
    ..., end n]``, ``[busy, ...]``) with numpy; None for short runs, or where float64
    products would differ from Python's (``StepCost.fill_decode_durations``)."""
    if n < NUMPY_STEPS:
        return None
    out = np.empty((3, n + 1))  # durations (after a free slot), ends, busy
    if not inst.cost.fill_decode_durations(out[0, 1:], b, ctx, n):
        return None
    durs, ends, busy_row = out
    durs[0] = start
    np.add.accumulate(durs, out=ends)  # one addition at a time
    durs[0] = busy
    np.add.accumulate(durs, out=busy_row)
    return ends, busy_row


def apply(inst: Instance, run: DecodeRun, upto: int) -> None:
    """Commit the run's steps up to ``upto`` (none of them finishes a request). Requests
    that keep token stamps (``token_ns``) get the steps' end times in integer ns;
    others' ``on_progress`` is called once."""
    a = run.applied
    j = upto - a
    if j <= 0:
        return
    run.applied = upto
    st = inst.stats
    st.busy_s = float(run.busy[upto])  # it was busy[a]: nothing else steps the instance
    st.steps += j
    dec = inst.decoding
    st.generation_tokens += len(dec) * j
    inst._decode_ctx += len(dec) * j
    ends: list[float] | array[int] | None = None
    for r in dec:
        r.generated += j
        if r.token_ns is not None:
            if ends is None:
                ends = _ends(run.times, a, upto, True)
            r.token_ns.extend(ends)  # type: ignore[arg-type]
        elif r.on_progress is not None:
            r.on_progress(r)


def _ends(times: Floats, a: int, upto: int, ns: bool) -> list[float] | array[int]:
    """Steps ``a + 1..upto``'s end times: floats, or with ``ns`` integer nanoseconds in an
    ``array.array`` (``round(t * 1e9)``: numpy's product and round-half-even are the same
    IEEE operations; a receiver that keeps arrays extends its own by a copy of bytes)."""
    part = times[a + 1:upto + 1]
    if isinstance(part, np.ndarray):
        if ns:
            return array("q", np.rint(part * 1e9).astype(np.int64).tobytes())
        return part.tolist()
    return array("q", [round(e * 1e9) for e in part]) if ns else [float(e) for e in part]


def cut(inst: Instance, run: DecodeRun, t: float, ended_at_t: bool) -> float:
    """End the run at time ``t``: commit the steps ended before ``t`` (and those ending at
    ``t`` with ``ended_at_t``), plan the step in progress as it was planned at its start;
    return its end (the driver commits it there, as any planned step)."""
    m = ended_steps(run, t, ended_at_t)
    apply(inst, run, m)
    return _plan(inst, run, m)


def ended_steps(run: DecodeRun, t: float, ended_at_t: bool) -> int:
    """The run's steps ended by ``t`` (those ending at ``t`` with ``ended_at_t``), short
    of its last: the steps a cut at ``t`` commits."""
    times = run.times
    m = (bisect.bisect_right(times, t, 1) if ended_at_t else bisect.bisect_left(times, t, 1))
    return min(m - 1, run.steps - 1)


def last_step(inst: Instance, run: DecodeRun) -> float:
    """The run's last step finishes a request: commit the others, plan it as usual and
    return its end (the driver commits it there)."""
    apply(inst, run, run.steps - 1)
    return _plan(inst, run, run.steps - 1)


def _plan(inst: Instance, run: DecodeRun, m: int) -> float:
    """``inst.plan(run.times[m])`` for the run's step ``m + 1``, whose start follows the
    steps committed: a decode step of the whole batch (what ``decode_run`` checked still
    holds), of the run's duration; return its end. (Were a request aborted behind the
    driver's back, as at shutdown, ``plan`` itself plans it.)"""
    if inst._dirty:
        dur = inst.plan(float(run.times[m]))
        assert dur is not None
        return float(run.times[m]) + dur
    inst._dec_batch = inst.decoding
    inst._prefill_plan = ()
    st = inst.stats
    st.steps += 1
    st.busy_s = float(run.busy[m + 1])  # busy[m] + the step's duration
    return float(run.times[m + 1])
