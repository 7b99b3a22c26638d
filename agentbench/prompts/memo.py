"""Prompts remembered across the variants of a sweep.

Every variant of a sweep that shares a trace (read once: ``experiment.run``) replays the
same sessions with the same salts, so its prompt builders make the same block hashes turn
after turn; only the engine behind them differs. ``PromptMemo`` keeps each turn's prompt
as the previous turn's hashes it keeps and the hashes it adds (what a turn costs in
memory is what it adds, not its length), so a later variant's turn is one copy of the
kept prefix and one of the rest instead of its hashing (``SegmentPrompt``: its lineage's
hashes once, then the blocks past them in Python integers; about 12 us a prompt against
the memo's 4-5).

A prompt is a function of its builder's settings (salt, session, template tokens, shared
prefix, block size), its turn and the next one: the memo keys each builder's turns by
those (the turns by identity: the memo holds the turns it keys and follows). A remembered
turn is used only when the builder's last prompt was the turn it was remembered after (a
session replayed from a warm start's turn, or past where an earlier variant stopped,
builds as usual). A memo holds at most ``budget_bytes`` (its hashes and what holds them),
then stops remembering.
"""

from __future__ import annotations

from array import array
from typing import Any

from agentbench.prompts.segments import SegmentPrompt, SimPrompt
from agentbench.traces.model import Turn

#: what a memo keeps at most (bytes: its hashes and what holds them); past it, later
#: turns are built each time
BUDGET_BYTES = 256 << 20
#: a remembered turn's memory besides its hashes (its tuples, key, array header and dict
#: slot), and a session's besides its turns (its key), as ``tracemalloc`` measures them
#: when none of the tuples comes from Python's free list
ENTRY_BYTES = 280
BUILDER_BYTES = 150

# a turn and the next one (None for a session's last)
_Pair = tuple[Turn, Turn | None]
# a remembered turn: (the pair it follows, None for a session's first built turn; hashes
# of the previous prompt kept; hashes added; tokens; its own pair). The memo holds the
# turns it keys, so their ids name them as long as it lives.
_Entry = tuple[_Pair | None, int, "array[int]", int, _Pair]


def _same(a: _Pair | None, b: _Pair | None) -> bool:
    return a is b or (a is not None and b is not None and a[0] is b[0] and a[1] is b[1])


class PromptMemo:
    """Turns' prompts by builder settings, shared by the variants of one trace (kept in
    the trace's ``memo``)."""

    def __init__(self, budget_bytes: int = BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.bytes = 0
        self._builders: dict[tuple[Any, ...], dict[tuple[int, int], _Entry]] = {}
        self.hits = 0
        self.built = 0

    def wrap(self, builder: Any) -> Any:
        """``builder`` with its prompts remembered (a ``SegmentPrompt``), else itself."""
        if type(builder) is not SegmentPrompt:
            return builder
        key = (builder.salt, builder.session_id, builder.overhead, builder.shared_prefix,
               builder.chat, builder.block_size)
        turns = self._builders.get(key)
        if turns is None:
            self._builders[key] = turns = {}
            self.bytes += BUILDER_BYTES
        return MemoPrompt(builder, turns, self)


class MemoPrompt:
    """One session's ``SegmentPrompt`` through a ``PromptMemo``."""

    __slots__ = ("inner", "turns", "memo", "_last", "_last_pair", "_computed")

    def __init__(self, inner: SegmentPrompt, turns: dict[tuple[int, int], _Entry],
                 memo: PromptMemo) -> None:
        self.inner = inner
        self.turns = turns
        self.memo = memo
        self._last: array[int] | None = None  # the last prompt's hashes
        self._last_pair: _Pair | None = None  # and its turn and next turn
        self._computed = False  # the last prompt is the inner builder's last one

    def build(self, turn: Turn, next_turn: Turn | None) -> SimPrompt:
        pair = (turn, next_turn)
        key = (id(turn), id(next_turn))
        entry = self.turns.get(key)
        if entry is not None and _same(entry[4], pair) and _same(entry[0], self._last_pair):
            keep, added, tokens = entry[1], entry[2], entry[3]
            hashes = self._last[:keep] if self._last is not None else array("q")
            hashes.extend(added)
            self.memo.hits += 1
            self._last, self._last_pair, self._computed = hashes, pair, False
            return SimPrompt(tokens, hashes)
        prompt = self.inner.build(turn, next_turn)
        self.memo.built += 1
        # remembered after the previous prompt when the inner builder made that one too
        # (it kept ``kept`` of its hashes), or as a session's first; not after a
        # remembered turn (the inner builder's last prompt is then an older one)
        if entry is None and (self._computed or self._last_pair is None) \
                and self.memo.bytes < self.memo.budget_bytes:
            keep = self.inner.kept if self._computed else 0
            added = prompt.hashes[keep:]
            self.turns[key] = (self._last_pair, keep, added, prompt.tokens, pair)
            self.memo.bytes += added.itemsize * len(added) + ENTRY_BYTES
        self._last, self._last_pair, self._computed = prompt.hashes, pair, True
        return prompt
