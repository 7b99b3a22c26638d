"""The trace model (docs/architecture.md#traces): a trace is a set of agent sessions, a session an
ordered list of turns, a turn one LLM request described by token counts and block
hash ids.

Hash ids are kept as ``numpy.int64`` arrays: a 142K-token context at 64-token blocks
is 2,200 ids per turn, and an agentic session re-sends almost all of them every turn.
Readers and the synthetic generator may hand out *views* of one growing per-session
buffer, so a session costs its unique blocks in memory, not turns x context.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from agentbench.errors import InputError
from agentbench.traces import MAX_TOKENS

Relation = Literal["root", "fork", "spawn"]
RELATIONS: tuple[str, ...] = ("root", "fork", "spawn")
HashIds = npt.NDArray[np.int64]

#: The longest recorded time (``t``, ``think_s``, ``api_s``, ``start_s``) a trace may hold:
#: about 32 years, so a garbled one (``1e300``) is an error naming its field, not an
#: overflow or a replay that waits for ages.
MAX_SECONDS = 1e9


def check_seconds(v: float, name: str, **where: str) -> None:
    """A recorded time must be finite, non-negative and at most ``MAX_SECONDS``."""
    if not 0 <= v < math.inf:  # also NaN
        raise InputError(f"expected a finite non-negative time, got {v}", field=name, **where)
    if v > MAX_SECONDS:
        raise InputError(f"{v:g} s is over the {MAX_SECONDS:g} s a recorded time may be",
                         field=name, **where)


def as_hash_ids(values: Sequence[int] | npt.ArrayLike) -> HashIds:
    """Hash ids as a read-only-friendly int64 array (no copy when already one)."""
    arr = np.asarray(values, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError("hash_ids must be a flat list of integers")
    return arr


def common_prefix(a: npt.ArrayLike, b: npt.ArrayLike) -> int:
    """How many leading ids ``a`` and ``b`` share (one memcmp when all of the shorter's
    do and their types agree, the usual case for a turn and the one before it)."""
    x, y = np.asarray(a), np.asarray(b)
    k = min(len(x), len(y))
    if x.dtype == y.dtype and x[:k].tobytes() == y[:k].tobytes():
        return k
    diff = np.flatnonzero(x[:k] != y[:k])
    return int(diff[0]) if diff.size else k


@dataclass(slots=True, eq=False)
class Turn:
    """One LLM request of a session.

    ``t`` is seconds from the session start as recorded; ``think_s`` the client/tool
    time before this request (after the previous response ended); ``api_s`` the
    recorded server time when known. ``hash_ids`` cover the prompt in ``block_size``
    token blocks; the last block may be partial, and tokens past the last id (when a
    source hashes only whole blocks) are a unique tail.
    """

    turn: int
    t: float
    think_s: float
    api_s: float | None
    input_tokens: int
    output_tokens: int
    hash_ids: HashIds
    block_size: int
    cached_tokens: int | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Turn):
            return NotImplemented
        return (
            self.turn == other.turn
            and _same_float(self.t, other.t)
            and _same_float(self.think_s, other.think_s)
            and _same_float(self.api_s, other.api_s)
            and self.input_tokens == other.input_tokens
            and self.output_tokens == other.output_tokens
            and self.block_size == other.block_size
            and self.cached_tokens == other.cached_tokens
            and np.array_equal(self.hash_ids, other.hash_ids)
        )

    __hash__ = None  # type: ignore[assignment]

    def validate(self) -> None:
        """Raise ``InputError`` (field named) when the turn cannot be a real request."""
        for name, n in (("input_tokens", self.input_tokens),
                        ("output_tokens", self.output_tokens)):
            if n < 0:
                raise InputError(f"negative length {n}", field=name)
            if n > MAX_TOKENS:
                raise InputError(f"{n} tokens is over the {MAX_TOKENS:,} a request may count",
                                 field=name)
        if self.block_size <= 0:
            raise InputError(f"block size must be positive, got {self.block_size}",
                             field="block_size")
        allowed = math.ceil(self.input_tokens / self.block_size)
        if len(self.hash_ids) > allowed:
            raise InputError(
                f"{len(self.hash_ids)} hash ids but {self.input_tokens} input tokens allow at "
                f"most {allowed} blocks of {self.block_size}",
                field="hash_ids",
            )
        for name, v in (("t", self.t), ("think_s", self.think_s), ("api_s", self.api_s)):
            if v is not None:
                check_seconds(v, name)
        if self.cached_tokens is not None and not 0 <= self.cached_tokens <= self.input_tokens:
            raise InputError(
                f"cached_tokens {self.cached_tokens} outside [0, {self.input_tokens}]",
                field="cached_tokens",
            )


@dataclass(slots=True, eq=False)
class Session:
    """One agent (root) or subagent (fork/spawn) session.

    ``parent_turn`` is the parent's turn after which this session starts (None: at the
    parent's start); ``join_turn`` the parent's turn that waits for it (None: runs in
    the background). ``scope`` names the hash scope: equal hash ids mean equal blocks
    only within one scope. ``start_s`` is the recorded start, seconds from the trace
    start: with turn ``t`` and ``api_s`` it gives the pause a parent took after a joined
    child's last response (``agentbench.replay.treespec.join_pause_s``).
    """

    session_id: str
    parent_id: str | None
    relation: Relation
    parent_turn: int | None
    join_turn: int | None
    model: str | None
    source: str
    scope: str
    start_s: float
    turns: list[Turn] = field(default_factory=list)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        return (
            self.session_id == other.session_id
            and self.parent_id == other.parent_id
            and self.relation == other.relation
            and self.parent_turn == other.parent_turn
            and self.join_turn == other.join_turn
            and self.model == other.model
            and self.source == other.source
            and self.scope == other.scope
            and _same_float(self.start_s, other.start_s)
            and self.turns == other.turns
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def is_root(self) -> bool:
        return self.parent_id is None


@dataclass(slots=True, eq=False)
class Trace:
    """A set of sessions, in source order (roots before their children).

    ``skipped`` holds one line (the file and why) per bad file a ``skip_bad`` read of a
    folder left out; empty otherwise. ``memo`` keeps figures derived from the sessions
    (the content hash, the potential cached tokens) for an owner that will not change them
    again: ``agentbench.experiment`` reads a trace once for all the variants that share it,
    and they need those figures once, not once each. Empty unless an owner fills it.
    """

    sessions: list[Session]
    name: str = ""
    skipped: list[str] = field(default_factory=list)
    memo: dict[str, Any] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self.sessions == other.sessions

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.sessions)

    def roots(self) -> list[Session]:
        return [s for s in self.sessions if s.parent_id is None]

    def by_id(self) -> dict[str, Session]:
        return {s.session_id: s for s in self.sessions}

    def children(self) -> dict[str, list[Session]]:
        """Children of every session id, in source order."""
        out: dict[str, list[Session]] = {}
        for s in self.sessions:
            if s.parent_id is not None:
                out.setdefault(s.parent_id, []).append(s)
        return out

    def trees(self) -> list[list[Session]]:
        """Each root with its descendants (depth first, source order): what a lane replays."""
        kids = self.children()
        out = []
        for root in self.roots():
            tree: list[Session] = []
            stack = [root]
            while stack:
                s = stack.pop()
                tree.append(s)
                stack.extend(reversed(kids.get(s.session_id, [])))
            out.append(tree)
        return out

    def n_requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def validate(self) -> None:
        """Check links and every turn; raise ``InputError`` naming session, turn and field."""
        ids = self.by_id()
        if len(ids) != len(self.sessions):
            seen: set[str] = set()
            for s in self.sessions:
                if s.session_id in seen:
                    raise InputError("duplicate session id", source=s.source,
                                     where=f"session {s.session_id}", field="session_id")
                seen.add(s.session_id)
        for s in self.sessions:
            where = f"session {s.session_id}"
            if s.relation not in RELATIONS:
                raise InputError(f"unknown relation {s.relation!r}", source=s.source,
                                 where=where, field="relation")
            if (s.parent_id is None) != (s.relation == "root"):
                raise InputError("a root has no parent and only a root", source=s.source,
                                 where=where, field="parent_id")
            if s.parent_id is not None:
                parent = ids.get(s.parent_id)
                if parent is None:
                    raise InputError(f"parent {s.parent_id!r} not in trace", source=s.source,
                                     where=where, field="parent_id")
                n = len(parent.turns)
                for name, val in (("parent_turn", s.parent_turn), ("join_turn", s.join_turn)):
                    if val is not None and not 0 <= val < n:
                        raise InputError(f"{val} outside the parent's {n} turns",
                                         source=s.source, where=where, field=name)
                if (s.parent_turn is not None and s.join_turn is not None
                        and s.join_turn <= s.parent_turn):
                    raise InputError("join_turn must come after parent_turn", source=s.source,
                                     where=where, field="join_turn")
            check_seconds(s.start_s, "start_s", source=s.source, where=where)
            for i, turn in enumerate(s.turns):
                if turn.turn != i:
                    raise InputError(f"turn index {turn.turn} at position {i}",
                                     source=s.source, where=where, field="turn")
                if i and turn.t < s.turns[i - 1].t:  # turns are in time order
                    raise InputError(f"t {turn.t} is before the previous turn's "
                                     f"{s.turns[i - 1].t}", source=s.source,
                                     where=f"{where} turn {i}", field="t")
                try:
                    turn.validate()
                except InputError as e:
                    raise e.located(source=s.source, where=f"{where} turn {i}") from None


def iter_turns_in_send_order(sessions: Iterable[Session]) -> Iterator[tuple[Session, Turn]]:
    """Turns ordered by recorded absolute start (session ``start_s`` + ``t``), ties kept in
    source order: the order an infinite cache would have seen them."""
    items: list[tuple[float, int, Session, Turn]] = []
    order = 0
    for s in sessions:
        for turn in s.turns:
            items.append((s.start_s + turn.t, order, s, turn))
            order += 1
    items.sort(key=lambda x: (x[0], x[1]))
    for _, _, s, turn in items:
        yield s, turn


def _same_float(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12,
                                                                         abs_tol=1e-9)
