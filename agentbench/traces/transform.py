"""Trace transforms that fit real traces to small test models while keeping their prefix
structure (which turns share which blocks), so the potential hit rate survives.

``scale(trace, factor)`` multiplies input and output lengths by ``factor``. The block
size shrinks with it when ``block_size x factor`` is a whole number of tokens; otherwise
``k`` consecutive hash ids are merged into one block of ``round(k x block_size x factor)``
tokens, the merged id standing for the whole group (prefix-chained: equal groups at the
same position give equal ids), so prefix sharing is kept at a coarser grain.

``truncate(trace, max_context_tokens)`` caps every prompt at its first N tokens (a prefix
of a prefix is still a prefix), and drops the hash ids past the cap.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from agentbench.errors import InputError
from agentbench.traces import MIN_SCALE
from agentbench.traces.model import HashIds, Session, Trace, Turn


def check_scale(factor: float, field: str = "scale") -> None:
    """Refuse a scale factor outside ``MIN_SCALE`` to 1 (NaN too), naming ``field``."""
    if not MIN_SCALE <= factor <= 1:
        raise InputError(f"scale factor must be in [{MIN_SCALE:g}, 1] (below, prompts "
                         f"shrink to nothing), got {factor:g}", field=field)


def scale(trace: Trace, factor: float) -> Trace:
    """A copy of ``trace`` with token counts scaled by ``factor`` (``MIN_SCALE`` to 1)."""
    check_scale(factor)
    if factor == 1:
        return trace
    merged: dict[tuple[int, ...], int] = {}
    out = []
    for s in trace.sessions:
        turns = []
        for t in s.turns:
            group, new_bs = block_grouping(t.block_size, factor)
            ids = _merge(t.hash_ids, group, merged) if group > 1 else t.hash_ids
            inp = max(1, round(t.input_tokens * factor)) if t.input_tokens else 0
            ids = ids[: math.ceil(inp / new_bs)]  # rounding may leave one block too many
            cached = None if t.cached_tokens is None else min(inp, round(t.cached_tokens * factor))
            turns.append(replace(
                t, input_tokens=inp,
                output_tokens=max(1, round(t.output_tokens * factor)) if t.output_tokens else 0,
                hash_ids=ids, block_size=new_bs, cached_tokens=cached,
            ))
        out.append(_with_turns(s, turns))
    return Trace(out, name=f"{trace.name}@x{factor:g}", skipped=trace.skipped)


def truncate(trace: Trace, max_context_tokens: int) -> Trace:
    """A copy of ``trace`` whose prompts keep only their first ``max_context_tokens``."""
    if max_context_tokens <= 0:
        raise InputError("must be positive", field="max_context_tokens")
    out = []
    for s in trace.sessions:
        turns = []
        for t in s.turns:
            if t.input_tokens <= max_context_tokens:
                turns.append(t)
                continue
            keep = math.ceil(max_context_tokens / t.block_size)
            cached = None if t.cached_tokens is None else min(t.cached_tokens, max_context_tokens)
            turns.append(replace(t, input_tokens=max_context_tokens, hash_ids=t.hash_ids[:keep],
                                 cached_tokens=cached))
        out.append(_with_turns(s, turns))
    return Trace(out, name=f"{trace.name}@max{max_context_tokens}", skipped=trace.skipped)


def block_grouping(block_size: int, factor: float) -> tuple[int, int]:
    """(ids merged per new block, new block size): the smallest group whose scaled size is
    at least one token and within 2% of a whole number of tokens (else the best of 1..64)."""
    x = block_size * factor
    best = (math.inf, 1, max(1, round(x)))
    for k in range(1, 65):
        size = k * x
        if size < 1:
            continue
        err = abs(round(size) - size) / size
        if err <= 0.02:
            return k, round(size)
        best = min(best, (err, k, round(size)))
    return best[1], best[2]


def _merge(ids: HashIds, group: int, table: dict[tuple[int, ...], int]) -> HashIds:
    """Merge every ``group`` consecutive ids (the last group may be short) into one id.

    The new id identifies the group's ids *and* everything before them, so a merged block
    is shared only when the original prefixes were."""
    n = math.ceil(len(ids) / group)
    out = np.empty(n, dtype=np.int64)
    prev = -1
    for i in range(n):
        key = (prev, *ids[i * group:(i + 1) * group].tolist())
        new = table.get(key)
        if new is None:
            new = len(table)
            table[key] = new
        out[i] = new
        prev = new
    return out


def _with_turns(s: Session, turns: list[Turn]) -> Session:
    return replace(s, turns=turns)
