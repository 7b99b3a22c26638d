"""A reference for ``agentbench.prompts.segments.SegmentPrompt``: the builder it replaced,
which built each turn's block hashes from the previous turn's (the same definition,
computed another way). Tests check that both give the same hashes."""

from __future__ import annotations

from array import array

import numpy as np
import numpy.typing as npt

from agentbench.prompts.layout import Segment, tail_layout
from agentbench.prompts.segments import (
    _END_I,
    _FEW,
    _GOLD,
    _PRIMER_I,
    _ROLE_I,
    _SHARED,
    U64,
    WEIGHTS,
    SimPrompt,
    _ident,
    _mix,
    _mix_int,
    _salt_base,
)
from agentbench.traces.model import Turn

_M64 = (1 << 64) - 1


def _seg_idents(salt: int, segs: list[Segment]) -> list[int]:
    base, tail = _salt_base(salt, False), _salt_base(salt, True)
    return [_SHARED if s.shared else
            _mix_int(_mix_int(((int(s.key) & _M64) + (tail if s.tail else base)) & _M64))
            for s in segs]


class ReferencePrompt:
    """The prompt builder as it was written before lineages were hashed once
    (``agentbench.prompts.segments.SegmentPrompt``, 2026-12-06): each turn's block hashes
    from the previous prompt's, incrementally, numpy call by numpy call."""

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
