"""Words a real tokenizer counts as exactly one token each, for prompts a real server counts
the way the trace does.

``agentbench.traces.words``'s synthetic words (" baco") are one token to the approximate
tokenizer (and so to the embedded simulator) but about two to a real BPE (measured 1.98
with DeepSeek-V4's). With ``prompt.tokenizer`` naming the server's tokenizer, blocks are
drawn from that tokenizer's own single-token words instead (the same seeded draw, so equal
(salt, hash id) still give equal text), and a server using it counts exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from agentbench.errors import InputError

MAX_WORDS = 8100
MIN_WORDS = 1000
_WORD = re.compile(r"(?:Ġ|▁)([a-z]{3,8})")


@dataclass(frozen=True)
class WordVocab:
    """Single-token words (each with its leading space) and their token ids."""

    name: str
    words: np.ndarray  # object array of str
    ids: np.ndarray  # int64


def vocab_from_tokenizer(spec: str) -> WordVocab:
    """The single-token lowercase words of ``spec`` (tokenizer.json path or hub id),
    checked to count additively when concatenated."""
    from agentbench.traces.tokenizers import get_tokenizer

    tok = get_tokenizer(spec)
    raw = getattr(tok, "_tok", None)
    if raw is None:
        raise InputError("prompt.tokenizer must name a tokenizer.json or hub id",
                         field="prompt.tokenizer")
    cands = sorted((i, m.group(1)) for s, i in raw.get_vocab().items()
                   if (m := _WORD.fullmatch(s)))
    words: list[str] = []
    ids: list[int] = []
    texts = [" " + w for _, w in cands]
    for (i, _), text, enc in zip(cands, texts, raw.encode_batch(texts, add_special_tokens=False),
                                 strict=True):
        if enc.ids == [i]:
            words.append(text)
            ids.append(i)
        if len(words) == MAX_WORDS:
            break
    if len(words) < MIN_WORDS:
        raise InputError(f"only {len(words)} single-token words found (need {MIN_WORDS})",
                         source=spec, field="prompt.tokenizer")
    rng = np.random.default_rng(0)
    sample = rng.integers(0, len(words), 4096)
    n = len(raw.encode("".join(words[j] for j in sample), add_special_tokens=False).ids)
    if n != len(sample):
        raise InputError(f"{len(sample)} words joined count as {n} tokens: this tokenizer does "
                         "not split at spaces, prompts cannot be counted exactly",
                         source=spec, field="prompt.tokenizer")
    return WordVocab(str(spec), np.array(words, dtype=object), np.array(ids, dtype=np.int64))
