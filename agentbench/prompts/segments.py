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

from array import array
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agentbench.prompts.layout import SHARED_PREFIX_SALT, Segment, tail_layout
from agentbench.traces.model import Turn
from agentbench.traces.words import CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_REPLY_PRIMER

U64 = npt.NDArray[np.uint64]
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_TAIL = np.uint64(0x7A11_0000_0000_0000)
# identities of the chat template's tokens (role, end of message, reply primer)
_ROLE, _END, _PRIMER = (np.uint64(0xC0DE_0000_0000_0001 + i) for i in range(3))
assert CHAT_TOKENS_PER_MESSAGE == 2 and CHAT_TOKENS_REPLY_PRIMER == 1


_M64 = (1 << 64) - 1
_GOLD_I, _TAIL_I = int(_GOLD), int(_TAIL)
#: up to this many values are mixed as Python ints (faster than numpy's calls)
_FEW = 8
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: U64) -> U64:
    """``splitmix64`` of a uint64 array, as a new array (array arithmetic wraps without a
    warning, so no ``errstate`` is needed; in place after the first step, the shifts
    into one scratch array)."""
    z = x + _GOLD
    t = z >> _S30
    z ^= t
    z *= _C1
    np.right_shift(z, _S27, out=t)
    z ^= t
    z *= _C2
    np.right_shift(z, _S31, out=t)
    z ^= t
    return z


def _mix_int(x: int) -> int:
    """``splitmix64`` of one value as Python ints (a few segments: numpy's per-call cost
    is more than the arithmetic)."""
    z = (x + _GOLD_I) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _salt_base(salt: int, tail: bool) -> int:
    return (salt * _GOLD_I + (_TAIL_I if tail else 0)) & _M64


def _ident(salt: int, keys: npt.NDArray[np.int64] | list[int], tail: bool = False) -> U64:
    """The identity of blocks ``keys`` of one salt: equal exactly when their text is."""
    k = np.asarray(keys, dtype=np.int64)
    base = _salt_base(salt, tail)
    if k.size <= _FEW:
        return np.array([_mix_int(_mix_int(((x & _M64) + base) & _M64)) for x in k.tolist()],
                        dtype=np.uint64)
    return _mix(_mix(k.view(np.uint64) + np.uint64(base)))


def _seg_idents(salt: int, segs: list[Segment]) -> list[int]:
    """``_ident`` of each segment (its key, as a tail or not; the shared prefix's own), as
    Python ints."""
    base, tail = _salt_base(salt, False), _salt_base(salt, True)
    return [_SHARED if s.shared else
            _mix_int(_mix_int(((int(s.key) & _M64) + (tail if s.tail else base)) & _M64))
            for s in segs]


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
_SHARED = int(_ident(SHARED_PREFIX_SALT, [0])[0])
_ROLE_I, _END_I, _PRIMER_I = int(_ROLE), int(_END), int(_PRIMER)


@dataclass(slots=True)
class SimPrompt:
    """What the simulator needs of a prompt: its token count and full-block hashes."""

    tokens: int
    hashes: array[int]  # int64 values: a prefix is copied as one block of memory


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
        self._prev_hashes: array[int] = array("q")
        # the previous prompt's chain: _chain[i] is the sum of its segments 0..i-1, mixed
        self._chain: U64 = np.zeros(1, dtype=np.uint64)
        head_i = ([_ROLE_I] if chat else []) + ([_SHARED] if shared_prefix else [])
        head_n = ([1] if chat else []) + ([shared_prefix] if shared_prefix else [])
        self._head_i = np.array(head_i, dtype=np.uint64)
        self._head_n = np.array(head_n, dtype=np.int64)
        self._tail_i = [_END_I, _PRIMER_I] if chat else []
        self._tail_n = [1, 1] if chat else []
        self._head_tokens = int(self._head_n.sum())
        self._bs = 0  # the previous turn's block size, and its whole blocks kept
        self._keep = 0
        #: hashes of the previous prompt that lead the last one (``_hashes``' ``keep``)
        self.kept = 0

    def build(self, turn: Turn, next_turn: Turn | None) -> SimPrompt:
        ids, bs = turn.hash_ids, turn.block_size
        n_full = min(len(ids), turn.input_tokens // bs)
        have = len(self._ids)
        # the previous turn's whole blocks lead this one's (one memcmp)
        if not (have <= n_full and bs == self._bs and ids.dtype == self._ids.dtype
                and ids[:have].tobytes() == self._ids.tobytes()):
            have = 0
            self._whole = np.zeros(0, dtype=np.uint64)
            self._keep = 0
        if n_full > have:
            self._whole = np.concatenate([self._whole, _ident(self.salt, ids[have:n_full])])
        self._ids, self._bs = ids[:n_full], bs
        keep, segs = tail_layout(turn, self.session_id, next_turn, n_full,
                                 self.overhead + self.shared_prefix)
        rest_i = _seg_idents(self.salt, segs) + self._tail_i
        rest_n = [s.n for s in segs] + self._tail_n
        idents = np.concatenate([self._head_i, self._whole[:keep],
                                 np.array(rest_i, dtype=np.uint64)])
        lens = np.concatenate([self._head_n, np.full(keep, bs, dtype=np.int64),
                               np.array(rest_n, dtype=np.int64)])
        # segments known equal to the previous prompt's: the head and the whole blocks both
        # kept (``_whole`` only grew since); ``_hashes`` looks past them one at a time
        same = self._head_i.size + min(keep, self._keep)
        self._keep = keep
        return SimPrompt(self._head_tokens + keep * bs + sum(rest_n),
                         self._hashes(idents, lens, same))

    def _hashes(self, idents: U64, lens: npt.NDArray[np.int64], same: int) -> array[int]:
        """Hashes of every full engine block; blocks inside the token prefix shared with the
        previous prompt are taken from it, and so is the chain of segments before the
        first one that differs (``same``: segments known to be the previous prompt's)."""
        bsz = self.block_size
        ends = lens.cumsum()  # the method: numpy's function wrapper costs a microsecond
        n_seg = idents.size
        n_tok = int(ends[-1]) if n_seg else 0
        n_blocks = n_tok // bsz
        # the token prefix shared with the previous prompt: segments 0..d-1 are equal
        pi, pl = self._prev_idents, self._prev_lens
        m = min(pi.size, n_seg)
        d = min(same, m)
        for _ in range(_FEW):  # a few more one at a time, then the rest at once
            if d == m or pi[d] != idents[d] or pl[d] != lens[d]:
                break
            d += 1
        else:
            diff = np.flatnonzero((pi[d:m] != idents[d:m]) | (pl[d:m] != lens[d:m]))
            d = d + int(diff[0]) if diff.size else m
        common = int(ends[d - 1]) if d else 0
        if d < m and pi[d] == idents[d]:
            common += int(min(pl[d], lens[d]))
        keep = min(common // bsz, n_blocks, len(self._prev_hashes))
        out = self._prev_hashes[:keep]
        self.kept = keep
        w = WEIGHTS.get(n_seg)
        # one splitmix pass over the changed segments and the new blocks' inner values
        if n_blocks > keep:
            last = np.arange(keep * bsz + bsz - 1, n_blocks * bsz, bsz, dtype=np.int64)
            j = ends.searchsorted(last, side="right")
            off = (last - (ends - lens)[j] + 1).view(np.uint64)
            mixed_all = _mix(np.concatenate([idents[d:], idents[j] + off * _GOLD]))
        else:
            mixed_all = _mix(idents[d:])
        # the chain up to segment d is the previous prompt's (same segments, same places)
        mixed = mixed_all[:n_seg - d]
        mixed *= w[d:]
        chain = np.empty(n_seg + 1, dtype=np.uint64)
        chain[:d + 1] = self._chain[:d + 1]
        mixed.cumsum(dtype=np.uint64, out=chain[d + 1:])
        chain[d + 1:] += chain[d]
        if n_blocks > keep:
            inner = mixed_all[n_seg - d:]
            inner *= w[j]
            inner += chain[j]
            inner += last.view(np.uint64)
            out.frombytes(_mix(inner).tobytes())  # ``out`` is a new array
        self._prev_idents, self._prev_lens, self._prev_hashes = idents, lens, out
        self._chain = chain
        return out
