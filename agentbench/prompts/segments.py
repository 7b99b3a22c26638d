"""Prompts for the in-process simulator as block hashes, without text.

Over HTTP the simulator tokenizes the prompt text and hashes every ``block_size`` tokens
with a prefix-chained hash (``agentbench.sim.prompt``). In virtual time the replay hands it
the same hashes' *equalities* directly: a prompt is the sequence of segments the text
would be made of (``agentbench.prompts.layout.layout``: template tokens, shared prefix,
trace blocks, cut blocks, unique tails), and the hash of the engine block ending at token
``p`` identifies the segments before ``p`` and the offset of ``p`` in its segment. Two
prompts get equal block hashes exactly where their text would share a token prefix
(block text of n tokens is a prefix of the same block with more tokens), so prefix-cache
hits, and so cached tokens, are the ones the text would give.

A session's builder keeps its previous prompt: a turn that extends it hashes only the
engine blocks past the shared prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agentbench.prompts.layout import SHARED_PREFIX_SALT, Segment, tail_layout
from agentbench.traces.model import Turn
from agentbench.traces.words import (
    CHAT_TOKENS_PER_MESSAGE,
    CHAT_TOKENS_REPLY_PRIMER,
    splitmix64,
)

U64 = npt.NDArray[np.uint64]
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_TAIL = np.uint64(0x7A11_0000_0000_0000)
# identities of the chat template's tokens (role, end of message, reply primer)
_ROLE, _END, _PRIMER = (np.uint64(0xC0DE_0000_0000_0001 + i) for i in range(3))
assert CHAT_TOKENS_PER_MESSAGE == 2 and CHAT_TOKENS_REPLY_PRIMER == 1


def _ident(salt: int, keys: npt.NDArray[np.int64] | list[int], tail: bool = False) -> U64:
    """The identity of blocks ``keys`` of one salt: equal exactly when their text is."""
    k = np.asarray(keys, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        s = np.uint64(salt) * _GOLD + (_TAIL if tail else np.uint64(0))
        return splitmix64(splitmix64(k + s))


def _seg_idents(salt: int, segs: list[Segment]) -> list[np.uint64]:
    """``_ident`` of each segment (its key, as a tail or not; the shared prefix's own), in
    one pass over arrays."""
    if not segs:
        return []
    keys = np.array([s.key for s in segs], dtype=np.int64).view(np.uint64)
    tails = np.array([s.tail for s in segs], dtype=bool)
    with np.errstate(over="ignore"):
        base = np.uint64(salt) * _GOLD
        out = splitmix64(splitmix64(keys + np.where(tails, base + _TAIL, base)))
    shared = [i for i, s in enumerate(segs) if s.shared]
    if shared:
        out[shared] = _SHARED
    return list(out)


class _Weights:
    """Fixed odd random weights per segment position (grown on demand)."""

    def __init__(self, seed: int = 0x5E9_AB) -> None:
        self._rng = np.random.default_rng(seed)
        self.w: U64 = np.zeros(0, dtype=np.uint64)

    def get(self, n: int) -> U64:
        if self.w.size < n:
            size = max(n, 2 * self.w.size, 4096)
            extra = self._rng.integers(0, 1 << 63, size=size - self.w.size, dtype=np.uint64)
            self.w = np.concatenate([self.w, (extra << np.uint64(1)) | np.uint64(1)])
        return self.w[:n]


WEIGHTS = _Weights()
#: the shared prefix's identity
_SHARED = _ident(SHARED_PREFIX_SALT, [0])[0]


@dataclass(slots=True)
class SimPrompt:
    """What the simulator needs of a prompt: its token count and full-block hashes."""

    tokens: int
    hashes: list[int]


class SegmentPrompt:
    """One session's prompts for the in-process simulator (see the module doc); the
    counterpart of ``agentbench.prompts.layout.SessionPrompt``, with the same layout."""

    def __init__(self, salt: int, session_id: str, overhead: int, shared_prefix: int,
                 chat: bool, block_size: int) -> None:
        self.salt = salt
        self.session_id = session_id
        self.overhead = overhead
        self.shared_prefix = shared_prefix
        self.chat = chat
        self.block_size = block_size
        self._ids: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._whole: U64 = np.zeros(0, dtype=np.uint64)  # identities of the whole blocks
        self._prev_idents: U64 = np.zeros(0, dtype=np.uint64)
        self._prev_lens: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._prev_hashes: list[int] = []

    def build(self, turn: Turn, next_turn: Turn | None) -> SimPrompt:
        ids, bs = turn.hash_ids, turn.block_size
        n_full = min(len(ids), turn.input_tokens // bs)
        have = len(self._ids)
        if not (have <= n_full and np.array_equal(ids[:have], self._ids)):
            have = 0
            self._whole = np.zeros(0, dtype=np.uint64)
        if n_full > have:
            self._whole = np.concatenate([self._whole, _ident(self.salt, ids[have:n_full])])
        self._ids = ids[:n_full]
        keep, segs = tail_layout(turn, self.session_id, next_turn, n_full,
                                 self.overhead + self.shared_prefix)
        head_i: list[np.uint64] = []
        head_n: list[int] = []
        if self.chat:
            head_i.append(_ROLE)
            head_n.append(1)
        if self.shared_prefix:
            head_i.append(_SHARED)
            head_n.append(self.shared_prefix)
        rest_i = _seg_idents(self.salt, segs)
        rest_n = [s.n for s in segs]
        if self.chat:
            rest_i += [_END, _PRIMER]
            rest_n += [1, 1]
        idents = np.concatenate([np.array(head_i, dtype=np.uint64), self._whole[:keep],
                                 np.array(rest_i, dtype=np.uint64)])
        lens = np.concatenate([np.array(head_n, dtype=np.int64),
                               np.full(keep, bs, dtype=np.int64),
                               np.array(rest_n, dtype=np.int64)])
        return SimPrompt(int(lens.sum()), self._hashes(idents, lens))

    def _hashes(self, idents: U64, lens: npt.NDArray[np.int64]) -> list[int]:
        """Hashes of every full engine block; blocks inside the token prefix shared with the
        previous prompt are taken from it."""
        bsz = self.block_size
        ends = np.cumsum(lens)
        n_tok = int(ends[-1]) if ends.size else 0
        n_blocks = n_tok // bsz
        # the token prefix shared with the previous prompt
        pi, pl = self._prev_idents, self._prev_lens
        m = min(pi.size, idents.size)
        diff = np.flatnonzero((pi[:m] != idents[:m]) | (pl[:m] != lens[:m]))
        d = int(diff[0]) if diff.size else m
        common = int(ends[d - 1]) if d else 0
        if d < m and pi[d] == idents[d]:
            common += int(min(pl[d], lens[d]))
        keep = min(common // bsz, n_blocks, len(self._prev_hashes))
        out = self._prev_hashes[:keep]
        if n_blocks > keep:
            w = WEIGHTS.get(idents.size)
            with np.errstate(over="ignore"):
                mixed = splitmix64(idents) * w
                before = np.cumsum(mixed, dtype=np.uint64) - mixed  # chain up to segment j
                last = np.arange(keep, n_blocks, dtype=np.int64) * bsz + (bsz - 1)
                j = np.searchsorted(ends, last, side="right")
                starts = ends[j] - lens[j]
                off = (last - starts + 1).astype(np.uint64)
                inner = splitmix64(idents[j] + off * _GOLD) * w[j]
                h = splitmix64(before[j] + inner + last.astype(np.uint64))
            out = out + h.view(np.int64).tolist()
        self._prev_idents, self._prev_lens, self._prev_hashes = idents, lens, out
        return out
