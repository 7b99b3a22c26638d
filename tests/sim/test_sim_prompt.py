"""The simulator counts prompt tokens exactly as agentbench's prompt builder does, and its
block hashes identify whole prefixes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench.sim.prompt import PromptHasher, split_at_pieces, splitmix64
from agentbench.traces.words import block_text, chat_prompt_tokens, token_ids

_ALPHABET = st.sampled_from(list("ab Z9_.,;:'\"()[]{}=-\n\r\t  éß世") + [" the", "\n\n",
                                                                       "  ", "def ", "123"])


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(_ALPHABET, max_size=400), chunk=st.integers(1, 64))
def test_chunked_tokenization_equals_whole_text(parts: list[str], chunk: int) -> None:
    text = "".join(parts)
    chunks = split_at_pieces(text, chunk)
    assert "".join(chunks) == text
    h = PromptHasher(16)
    whole = splitmix64(np.asarray(token_ids(text), dtype=np.int64).view(np.uint64))
    joined = [h._chunk(c) for c in chunks]
    got = np.concatenate(joined) if joined else np.zeros(0, dtype=np.uint64)
    assert got.tolist() == whole.tolist()


@settings(max_examples=50, deadline=None)
@given(contents=st.lists(st.lists(_ALPHABET, max_size=50).map("".join), min_size=1,
                         max_size=5))
def test_chat_prompt_length_matches_prompt_builder(contents: list[str]) -> None:
    h = PromptHasher(16)
    tokens = h.chat_tokens([("user", c) for c in contents])
    assert tokens.size == chat_prompt_tokens(contents)


def test_long_growing_message_reuses_cached_chunks() -> None:
    h = PromptHasher(16)
    text = "".join(block_text(3, i, 64) for i in range(2000))  # 128K tokens
    a = h.chat_tokens([("user", text)])
    n_chunks = len(h._cache)
    grown = text + block_text(3, 5000, 64)
    b = h.chat_tokens([("user", grown)])
    assert a.size == chat_prompt_tokens([text]) == 128_003
    assert b.size == chat_prompt_tokens([grown])
    assert len(h._cache) - n_chunks <= 2  # only the changed tail chunk is new
    ha, hb = h.block_hashes(a), h.block_hashes(b)
    # a's 8,000 full blocks (role token + 127,999 content tokens) all lie in the shared text.
    assert len(ha) == 128_003 // 16 == 8000 and len(hb) == 128_067 // 16
    assert hb[:8000] == ha


def test_block_hash_names_the_whole_prefix() -> None:
    h = PromptHasher(4)
    x = h.id_tokens([1, 2, 3, 4, 5, 6, 7, 8, 9])
    y = h.id_tokens([1, 2, 3, 4, 5, 6, 7, 8])
    z = h.id_tokens([0, 2, 3, 4, 5, 6, 7, 8])  # first block differs: no block matches
    assert len(h.block_hashes(x)) == 2  # full blocks only
    assert h.block_hashes(x) == h.block_hashes(y)
    assert not set(h.block_hashes(z)) & set(h.block_hashes(y))
    # The same block content after a different prefix hashes differently.
    w = h.id_tokens([9, 9, 9, 9, 5, 6, 7, 8])
    assert h.block_hashes(w)[1] != h.block_hashes(y)[1]
