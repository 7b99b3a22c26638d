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

A session's turns come in lineages, each turn's hash ids extending the previous turn's (a
growing conversation; a compaction starts a new one). The whole blocks of a lineage are
hashed once, with numpy, up to its last turn's; each turn then hashes only the few engine
blocks past them (its cut last block, its tail, the template's closing tokens) and copies
the rest (``SegmentPrompt``).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agentbench.prompts.layout import SHARED_PREFIX_SALT, tail_layout
from agentbench.traces.model import Turn, common_prefix
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


class _Epoch:
    """The block hashes of one lineage of a session's turns (each one's hash ids extending
    the one before), hashed once for all of them: the head segments, then every whole
    block of the lineage's last turn, ``bs`` tokens each. A turn of the lineage shares its
    leading segments with this sequence, and so the hashes of the engine blocks that end
    in them (``chain``: the chain before each segment)."""

    __slots__ = ("ids", "bs", "turns", "chain", "hashes", "n_head", "head_tokens")

    def __init__(self, owner: SegmentPrompt, ids: npt.NDArray[np.int64], bs: int,
                 turns: range) -> None:
        self.ids = ids
        self.bs = bs
        self.turns = turns  # the indices of the owner's turns in the lineage
        idents = np.concatenate([owner._head_i, _ident(owner.salt, ids)])
        lens = np.concatenate([owner._head_n, np.full(ids.size, bs, dtype=np.int64)])
        self.n_head = owner._head_i.size
        self.head_tokens = owner._head_tokens
        bsz = owner.block_size
        n_blocks = (owner._head_tokens + ids.size * bs) // bsz
        self.chain, self.hashes = _block_hashes(idents, lens, 0, 0, 0, 0, n_blocks, bsz)


class SegmentPrompt:
    """One session's prompts for the in-process simulator (see the module doc); the
    counterpart of ``agentbench.prompts.layout.SessionPrompt``, with the same layout.

    With the session's ``turns``, the whole blocks of each lineage of turns (each turn's
    hash ids extending the previous turn's) are hashed once for the lineage (``_Epoch``:
    about 40 numpy calls a lineage, not a turn); a turn then hashes only the few engine
    blocks past them (its cut last block, its tail, the template's last tokens) in Python
    integers, and copies the rest. A turn outside the session's list is hashed as a
    lineage of its own (and its next turn, when that extends it)."""

    def __init__(self, salt: int, session_id: str, overhead: int, shared_prefix: int,
                 chat: bool, block_size: int, turns: Sequence[Turn] = ()) -> None:
        self.salt = salt
        self.session_id = session_id
        self.overhead = overhead
        self.shared_prefix = shared_prefix
        self.chat = chat
        self.block_size = block_size
        self.turns = turns
        head_i = ([_ROLE_I] if chat else []) + ([_SHARED] if shared_prefix else [])
        head_n = ([1] if chat else []) + ([shared_prefix] if shared_prefix else [])
        self._head_i = np.array(head_i, dtype=np.uint64)
        self._head_n = np.array(head_n, dtype=np.int64)
        self._head_tokens = sum(head_n)
        self._tail_i = [_END_I, _PRIMER_I] if chat else []
        self._tail_n = [1, 1] if chat else []
        self._base = _salt_base(salt, False)
        self._tail_base = _salt_base(salt, True)
        self._epoch: _Epoch | None = None
        self._last: tuple[_Epoch, int] | None = None  # the last prompt's epoch and blocks
        #: hashes of the previous prompt that lead the last one (``PromptMemo``)
        self.kept = 0

    def build(self, turn: Turn, next_turn: Turn | None) -> SimPrompt:
        bs = turn.block_size
        n_full = min(len(turn.hash_ids), turn.input_tokens // bs)
        keep, segs = tail_layout(turn, self.session_id, next_turn, n_full,
                                 self.overhead + self.shared_prefix)
        ep = self._epoch_for(turn, next_turn, keep)
        # the segments after the kept whole blocks that are the epoch's next whole blocks
        # (a tail made of the next turn's blocks): matched too
        m, i, ids = keep, 0, ep.ids
        while i < len(segs) and m < ids.size:
            s = segs[i]
            if s.n != bs or s.tail or s.shared or s.key != ids[m]:
                break
            m += 1
            i += 1
        pos = ep.n_head + m  # the first segment hashed here
        t0 = ep.head_tokens + m * bs  # and its first token
        rest = segs[i:]
        idents = [_SHARED if s.shared else
                  _mix_int(_mix_int(((s.key & _M64) + (self._tail_base if s.tail
                                                        else self._base)) & _M64))
                  for s in rest] + self._tail_i
        lens = [s.n for s in rest] + self._tail_n
        tokens = t0 + sum(lens)
        bsz = self.block_size
        b0 = t0 // bsz  # blocks ending before t0: the epoch's
        out = array("q")
        out.frombytes(ep.hashes[:b0].data.cast("B"))  # one copy of the epoch's leading hashes
        b1 = tokens // bsz
        if b1 - b0 > _FEW_BLOCKS:
            out.frombytes(_tail_hashes_np(idents, lens, pos, t0, int(ep.chain[pos]), b0, b1,
                                          bsz).data.cast("B"))
        elif b1 > b0:
            out.extend(_tail_hashes(idents, lens, pos, t0, int(ep.chain[pos]), b0, b1, bsz))
        last = self._last
        self.kept = min(last[1], b0) if last is not None and last[0] is ep else 0
        self._last = (ep, b0)
        return SimPrompt(tokens, out)

    def _epoch_for(self, turn: Turn, next_turn: Turn | None, keep: int) -> _Epoch:
        """An epoch whose whole blocks start with ``turn``'s first ``keep``: the current
        one when ``turn`` is of its lineage (or its ids lead the epoch's), else the
        lineage from ``turn`` on."""
        ep = self._epoch
        bs = turn.block_size
        turns = self.turns
        k = turn.turn
        listed = 0 <= k < len(turns) and turns[k] is turn
        if ep is not None and ep.bs == bs:
            if listed and k in ep.turns:
                return ep
            if keep <= ep.ids.size and common_prefix(turn.hash_ids[:keep], ep.ids) == keep:
                return ep
        if listed:
            end = k
            while end + 1 < len(turns) and _extends(turns[end + 1], turns[end]):
                end += 1
            lineage, ids = range(k, end + 1), turns[end].hash_ids
        else:
            lineage = range(0)
            ids = next_turn.hash_ids if next_turn is not None and _extends(next_turn, turn) \
                else turn.hash_ids
        self._epoch = ep = _Epoch(self, np.ascontiguousarray(ids, dtype=np.int64), bs,
                                  lineage)
        return ep


def _extends(later: Turn, earlier: Turn) -> bool:
    """Whether ``later``'s hash ids start with all of ``earlier``'s (same block size)."""
    a, b = later.hash_ids, earlier.hash_ids
    return later.block_size == earlier.block_size and len(a) >= len(b) \
        and common_prefix(a, b) == len(b)


def _tail_hashes(idents: list[int], lens: list[int], pos: int, t0: int, chain: int,
                 b0: int, b1: int, bsz: int) -> list[int]:
    """The hashes of engine blocks ``b0..b1-1``, each ending in one of the segments
    ``idents``/``lens`` (the ``pos``-th segment of the prompt on, its first token
    ``t0``; ``chain`` the chain before them), as int64 values."""
    w = WEIGHTS.get(pos + len(idents))
    out = []
    j, start = 0, t0
    for b in range(b0, b1):
        last = b * bsz + bsz - 1
        while start + lens[j] <= last:
            chain = (chain + _mix_int(idents[j]) * int(w[pos + j])) & _M64
            start += lens[j]
            j += 1
        inner = (_mix_int((idents[j] + (last - start + 1) * _GOLD_I) & _M64)
                 * int(w[pos + j]) + chain + last) & _M64
        h = _mix_int(inner)
        out.append(h - (1 << 64) if h >> 63 else h)
    return out


#: more engine blocks than this past a turn's epoch are hashed with numpy (a long unique
#: tail), fewer in Python integers (numpy's per-call cost is more than the arithmetic)
_FEW_BLOCKS = 24


def _block_hashes(ident: U64, n: npt.NDArray[np.int64], pos: int, t0: int, chain0: int,
                  b0: int, b1: int, bsz: int) -> tuple[U64, npt.NDArray[np.int64]]:
    """The block hashes' definition with numpy, over segments ``ident``/``n`` (the
    ``pos``-th segment of the prompt on, its first token ``t0``, ``chain0`` the chain
    before them): (the chain before each segment and after the last, the hashes of engine
    blocks ``b0..b1-1`` as int64 values). A lineage's whole blocks (``_Epoch``, from the
    prompt's start) and a long tail past them (``_tail_hashes_np``)."""
    w = WEIGHTS.get(pos + ident.size)[pos:]
    chain = np.empty(ident.size + 1, dtype=np.uint64)
    chain[0] = chain0
    mixed = _mix(ident)
    mixed *= w
    mixed.cumsum(dtype=np.uint64, out=chain[1:])
    chain[1:] += np.uint64(chain0)
    ends = n.cumsum() + t0
    last = np.arange(b0 * bsz + bsz - 1, b1 * bsz, bsz, dtype=np.int64)
    j = ends.searchsorted(last, side="right")
    off = (last - (ends - n)[j] + 1).view(np.uint64)
    inner = _mix(ident[j] + off * _GOLD)
    inner *= w[j]
    inner += chain[j]
    inner += last.view(np.uint64)
    return chain, _mix(inner).view(np.int64)


def _tail_hashes_np(idents: list[int], lens: list[int], pos: int, t0: int, chain0: int,
                    b0: int, b1: int, bsz: int) -> npt.NDArray[np.int64]:
    """``_tail_hashes`` with numpy (the same operations, elementwise)."""
    return _block_hashes(np.array(idents, dtype=np.uint64), np.array(lens, dtype=np.int64),
                         pos, t0, chain0, b0, b1, bsz)[1]
