"""Trace analysis: the figures ``agentbench traces stats`` prints, and the potential
prefix hit rate (docs/architecture.md#traces) that replay records per request.

Potential cached tokens of a turn: the tokens of its longest leading run of blocks
already sent by an earlier turn in the same hash scope, with an infinite cache. Turns
are taken in recorded send order (session start + ``t``, ties in source order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.errors import printable
from agentbench.traces.model import Session, Trace, common_prefix

PCTS = (50, 90, 99)


# Turns up to this many blocks skip the vectorised comparison: numpy's per-call cost
# (~3 us) exceeds a Python set walk over so few ids (Mooncake: ~20 blocks a request).
_SHORT_TURN_BLOCKS = 64


def leading_seen_blocks(turn_ids: Sequence[npt.NDArray[np.int64]],
                        previous: Sequence[int] | None = None) -> npt.NDArray[np.int64]:
    """For turns in send order (one hash scope), the length of each turn's leading run of
    blocks that an *earlier* turn already sent.

    Agent turns mostly re-send an earlier turn's prompt: each turn is first compared
    (vectorised) with the latest earlier turn that starts with the same block and with
    ``previous[j]`` (its own session's previous turn, when given and >= 0), whose blocks
    are all sent; the run then continues through a set of every block sent so far. Cost:
    O(total blocks) in numpy plus O(blocks not covered by that comparison) in Python. (The
    session's own turn matters where siblings share a first block: subagents with one
    system prompt, whose turns interleave.)
    """
    n = len(turn_ids)
    out = np.zeros(n, dtype=np.int64)
    seen: set[int] = set()
    latest_by_first: dict[int, int] = {}  # first block id -> latest turn starting with it
    for j, ids in enumerate(turn_ids):
        m = len(ids)
        if m == 0:
            continue
        first = int(ids[0])
        run = 0
        c = latest_by_first.get(first)
        if m > _SHORT_TURN_BLOCKS:
            own = -1 if previous is None else previous[j]
            for cand in (c, own if own != c else None):
                if cand is None or not 0 <= cand < j:  # an earlier turn's blocks only
                    continue
                run = max(run, common_prefix(ids, turn_ids[cand]))
        if run < m:
            rest = ids[run:].tolist()
            for x in rest:
                if x not in seen:
                    break
                run += 1
            seen.update(rest)  # ids[:run] were sent by a compared turn already
        out[j] = run
        latest_by_first[first] = j
    return out


def potential_cached_tokens(sessions: Sequence[Session]) -> dict[tuple[str, int], int]:
    """Potential cached tokens of every turn, keyed by (session_id, turn index)."""
    out: dict[tuple[str, int], int] = {}
    for group in _by_scope(sessions).values():
        out.update(_scope_potential(group))
    return out


class Potential:
    """``potential_cached_tokens`` a hash scope at a time: the first turn asked of a scope
    computes that scope's turns (a replay reads only the trees it runs, and a synthesized
    AgentX trace's whole-trace figure took 1.4 s of a P/D variant that replays 300 of its
    34,000 requests). Same figures as the function."""

    def __init__(self, sessions: Sequence[Session]) -> None:
        self._scope_of = {s.session_id: s.scope for s in sessions}
        self._groups = _by_scope(sessions)
        self._values: dict[tuple[str, int], int] = {}

    def get(self, key: tuple[str, int], default: int = 0) -> int:
        got = self._values.get(key)
        if got is not None:
            return got
        group = self._groups.pop(self._scope_of.get(key[0], ""), None)
        if group is None:  # computed already (the key is not a turn), or unknown
            return default
        self._values.update(_scope_potential(group))
        return self._values.get(key, default)


_Group = list[tuple[int, Session]]


def _by_scope(sessions: Sequence[Session]) -> dict[str, _Group]:
    """Sessions by hash scope, each with the source-order number of its first turn."""
    groups: dict[str, _Group] = {}
    order = 0
    for s in sessions:
        groups.setdefault(s.scope, []).append((order, s))
        order += len(s.turns)
    return groups


def _scope_potential(group: _Group) -> dict[tuple[str, int], int]:
    """Potential cached tokens of one scope's turns, taken in recorded send order (start,
    ties in source order: ``iter_turns_in_send_order`` restricted to the scope)."""
    items = [(s.start_s + t.t, order + i, s, t) for order, s in group
             for i, t in enumerate(s.turns)]
    items.sort(key=lambda x: (x[0], x[1]))
    last: dict[int, int] = {}  # a session (by identity) -> its latest turn so far
    previous = []
    for j, (_, _, s, _) in enumerate(items):
        previous.append(last.get(id(s), -1))
        last[id(s)] = j
    runs = leading_seen_blocks([t.hash_ids for _, _, _, t in items], previous)
    return {(s.session_id, t.turn): min(int(run) * t.block_size, t.input_tokens)
            for (_, _, s, t), run in zip(items, runs, strict=True)}


def _pcts(values: npt.ArrayLike) -> dict[str, float | None]:
    arr = np.asarray(values, dtype=np.float64)
    out: dict[str, float | None] = {f"p{p}": None for p in PCTS}
    out["mean"] = None
    if arr.size:
        for p, q in zip(PCTS, np.percentile(arr, PCTS), strict=True):
            out[f"p{p}"] = float(q)
        out["mean"] = float(arr.mean())
    return out


@dataclass
class TraceStats:
    """What ``traces stats`` reports. Token and time distributions as p50/p90/p99 + mean."""

    name: str
    sessions: int
    roots: int
    forks: int
    spawns: int
    requests: int
    turns_per_root: dict[str, float | None]
    requests_per_tree: dict[str, float | None]
    input_tokens: dict[str, float | None]
    output_tokens: dict[str, float | None]
    input_output_ratio: float | None
    roots_with_subagents_share: float | None
    subagents_per_root_with_subagents: dict[str, float | None]
    think_s: dict[str, float | None]
    start_to_start_s: dict[str, float | None]
    context_growth_per_turn: dict[str, float | None]
    first_turn_input_tokens: dict[str, float | None]
    last_turn_input_tokens: dict[str, float | None]
    potential_hit_rate: float | None
    potential_hit_rate_by_scope: dict[str, float] = field(default_factory=dict)
    scopes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def trace_stats(trace: Trace) -> TraceStats:
    """Compute every figure of ``traces stats`` for ``trace``."""
    sessions = trace.sessions
    roots = [s for s in sessions if s.parent_id is None]
    turns = [t for s in sessions for t in s.turns]
    inp = np.fromiter((t.input_tokens for t in turns), dtype=np.int64, count=len(turns))
    out = np.fromiter((t.output_tokens for t in turns), dtype=np.int64, count=len(turns))
    later = [t for s in sessions for t in s.turns[1:]]
    s2s = [b.t - a.t for s in sessions for a, b in zip(s.turns, s.turns[1:], strict=False)]
    growth = [b.input_tokens - a.input_tokens for s in sessions
              for a, b in zip(s.turns, s.turns[1:], strict=False)]
    trees = trace.trees()
    subs = [len(tree) - 1 for tree in trees]
    with_subs = [n for n in subs if n > 0]
    pot = potential_cached_tokens(sessions)
    by_scope_num: dict[str, int] = {}
    by_scope_den: dict[str, int] = {}
    for s in sessions:
        for t in s.turns:
            by_scope_num[s.scope] = by_scope_num.get(s.scope, 0) + pot[(s.session_id, t.turn)]
            by_scope_den[s.scope] = by_scope_den.get(s.scope, 0) + t.input_tokens
    total_in = int(inp.sum())
    return TraceStats(
        name=trace.name,
        sessions=len(sessions),
        roots=len(roots),
        forks=sum(s.relation == "fork" for s in sessions),
        spawns=sum(s.relation == "spawn" for s in sessions),
        requests=len(turns),
        turns_per_root=_pcts([len(s.turns) for s in roots]),
        requests_per_tree=_pcts([sum(len(s.turns) for s in tree) for tree in trees]),
        input_tokens=_pcts(inp),
        output_tokens=_pcts(out),
        input_output_ratio=float(total_in / out.sum()) if out.sum() else None,
        roots_with_subagents_share=len(with_subs) / len(roots) if roots else None,
        subagents_per_root_with_subagents=_pcts(with_subs),
        think_s=_pcts([t.think_s for t in later]),
        start_to_start_s=_pcts(s2s),
        context_growth_per_turn=_pcts(growth),
        first_turn_input_tokens=_pcts([s.turns[0].input_tokens for s in roots if s.turns]),
        last_turn_input_tokens=_pcts([s.turns[-1].input_tokens for s in roots if s.turns]),
        potential_hit_rate=sum(pot.values()) / total_in if total_in else None,
        potential_hit_rate_by_scope={
            k: by_scope_num[k] / by_scope_den[k] for k in by_scope_den if by_scope_den[k]},
        scopes=len(by_scope_den),
    )


def format_stats(st: TraceStats) -> str:
    """Human-readable table of ``st``."""

    def dist(d: dict[str, float | None], unit: str = "", digits: int = 0) -> str:
        if d["p50"] is None:
            return "-"
        f = f"{{:,.{digits}f}}"
        return "  ".join(f"{k} {f.format(d[k])}{unit}" for k in ("p50", "p90", "p99", "mean"))

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = [
        f"trace              {printable(st.name)}",  # a native file's name is any text
        f"sessions           {st.sessions:,} (roots {st.roots:,}, forks {st.forks:,}, "
        f"spawns {st.spawns:,})",
        f"requests           {st.requests:,}",
        f"turns per root     {dist(st.turns_per_root, digits=1)}",
        f"requests per tree  {dist(st.requests_per_tree, digits=1)}",
        f"input tokens       {dist(st.input_tokens)}",
        f"output tokens      {dist(st.output_tokens)}",
        "input:output       " + ("-" if st.input_output_ratio is None
                                 else f"{st.input_output_ratio:,.1f}:1"),
        f"roots w/ subagents {pct(st.roots_with_subagents_share)}; subagents per such root "
        f"{dist(st.subagents_per_root_with_subagents, digits=1)}",
        f"think time         {dist(st.think_s, ' s', 1)}",
        f"start-to-start     {dist(st.start_to_start_s, ' s', 1)}",
        f"context growth     {dist(st.context_growth_per_turn, ' tok/turn')}",
        f"first-turn input   {dist(st.first_turn_input_tokens)}",
        f"last-turn input    {dist(st.last_turn_input_tokens)}",
        f"potential hit rate {pct(st.potential_hit_rate)} (infinite cache, {st.scopes:,} hash "
        f"scope{'s' if st.scopes != 1 else ''})",
    ]
    return "\n".join(lines)
