"""Prompt tokens and prefix-chained block hashes, computed the way agentbench's prompt builder
counts tokens (``agentbench.traces.words``).

A chat prompt is, per message, ``<role> content <end>`` (``CHAT_TOKENS_PER_MESSAGE`` = 2
template tokens) and then one ``<assistant>`` reply primer, so its length is exactly
``chat_prompt_tokens(contents)``. A completions prompt is its token-id list as given, or
``token_ids(text)``.

Block ``i``'s hash identifies the *whole* prefix ``tokens[: (i + 1) * block_size]`` (a
prefix-chained hash as in vLLM's prefix caching): ``H_i = mix(sum_j mix(t_j) * w_j + i)``
over positions ``j`` with fixed random odd weights ``w_j`` (uint64 arithmetic). It is a
vectorised cumulative sum, so a 142K-token prompt hashes in about a millisecond.

Tokenizing is cached per message content, and long contents per chunk cut at piece
boundaries (a space after a non-space: the tokenizer is additive there), so an agent whose
context grows each turn pays only for its new text.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.traces.words import splitmix64, token_ids

U64 = npt.NDArray[np.uint64]

#: Template token ids (negative: never produced by the tokenizer).
_ROLE_IDS = {"system": -1, "developer": -1, "user": -2, "assistant": -3, "tool": -4,
             "function": -4}
_OTHER_ROLE = -5
_END = -6
_PRIMER = -7
CHUNK_CHARS = 8192


def _mixed(ids: Sequence[int] | npt.NDArray[Any]) -> U64:
    return splitmix64(np.asarray(ids, dtype=np.int64).view(np.uint64))


def split_at_pieces(text: str, chunk_chars: int = CHUNK_CHARS) -> list[str]:
    """Cut ``text`` into chunks of about ``chunk_chars`` at positions where a space follows a
    non-space character: no tokenizer piece spans such a cut, so token ids are additive."""
    if len(text) <= chunk_chars:
        return [text]
    out = []
    start = 0
    n = len(text)
    while n - start > chunk_chars:
        j = text.find(" ", start + chunk_chars)
        while j != -1 and text[j - 1].isspace():
            j = text.find(" ", j + 1)
        if j == -1:
            break
        out.append(text[start:j])
        start = j
    out.append(text[start:])
    return out


class PromptHasher:
    """Token counts and block hashes of requests, with a bounded per-chunk token cache."""

    def __init__(self, block_size: int, max_cached_tokens: int = 16_000_000,
                 seed: int = 0x5151_AB) -> None:
        self.block_size = block_size
        self.max_cached_tokens = max_cached_tokens
        self._cache: OrderedDict[str, U64] = OrderedDict()
        self._cached_tokens = 0
        self._rng = np.random.default_rng(seed)
        self._weights: U64 = np.zeros(0, dtype=np.uint64)
        self._role = {r: _mixed([i]) for r, i in _ROLE_IDS.items()}
        self._other_role = _mixed([_OTHER_ROLE])
        self._end = _mixed([_END])
        self._primer = _mixed([_PRIMER])

    # ------------------------------------------------------------ tokens

    def _chunk(self, text: str) -> U64:
        hit = self._cache.get(text)
        if hit is not None:
            self._cache.move_to_end(text)
            return hit
        arr = _mixed(token_ids(text))
        self._cache[text] = arr
        self._cached_tokens += arr.size
        while self._cached_tokens > self.max_cached_tokens and self._cache:
            _, old = self._cache.popitem(last=False)
            self._cached_tokens -= old.size
        return arr

    def text_tokens(self, text: str) -> U64:
        """Mixed token ids of ``text`` (equal to ``token_ids(text)`` before mixing)."""
        parts = [self._chunk(c) for c in split_at_pieces(text)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def chat_tokens(self, messages: Sequence[tuple[str, str]]) -> U64:
        """Mixed token ids of a chat prompt of (role, content) messages."""
        parts: list[U64] = []
        for role, content in messages:
            parts.append(self._role.get(role, self._other_role))
            parts.extend(self._chunk(c) for c in split_at_pieces(content))
            parts.append(self._end)
        parts.append(self._primer)
        return np.concatenate(parts)

    def id_tokens(self, ids: Sequence[int] | npt.NDArray[Any]) -> U64:
        """Mixed token ids of a completions prompt given as token ids."""
        return _mixed(ids)

    # ------------------------------------------------------------ block hashes

    def _weights_for(self, n: int) -> U64:
        if self._weights.size < n:
            size = max(n, 2 * self._weights.size, 1 << 16)
            extra = self._rng.integers(0, 1 << 63, size=size - self._weights.size,
                                       dtype=np.uint64, endpoint=False)
            self._weights = np.concatenate([self._weights, (extra << np.uint64(1))
                                            | np.uint64(1)])
        return self._weights[:n]

    def block_hashes(self, tokens: U64) -> list[int]:
        """Prefix-chained hashes of every *full* block of ``tokens`` (Python ints)."""
        bs = self.block_size
        n_blocks = tokens.size // bs
        if n_blocks == 0:
            return []
        n = n_blocks * bs
        with np.errstate(over="ignore"):
            weighted = tokens[:n] * self._weights_for(n)
            sums = weighted.reshape(n_blocks, bs).sum(axis=1, dtype=np.uint64)
            chained = np.asarray(np.cumsum(sums, dtype=np.uint64)
                                 + np.arange(n_blocks, dtype=np.uint64), dtype=np.uint64)
        out: list[int] = splitmix64(chained).view(np.int64).tolist()
        return out
