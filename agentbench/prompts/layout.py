"""Prompts from hash ids (docs/architecture.md#replay): a block cache of pre-encoded,
already JSON-safe fragments, and request bodies assembled by joining bytes.

Each hash id maps to a fixed block of synthetic text (chat) or token ids (completions),
fixed by ``(salt, hash id)`` through :func:`agentbench.traces.words.block_text`. The salt
encodes the run seed, the trace copy and the hash scope, so copies never share cache by
accident. Memory grows with unique blocks: fragments are cached per salt and dropped when
the last tree using that salt ends.

Layout. A chat request is one user message whose content is the turn's blocks in order,
then a unique tail for tokens past the last hash id; the chat template's
``chat_prompt_tokens`` overhead (2 per message + 1 reply primer) and the opt-in shared
prefix are taken off the end of the content, so a server that counts like
``agentbench.traces.words`` reports exactly the trace's input tokens. Since every request is
one message of blocks, turn k+1's content starts with turn k's content for as long as
their leading hash ids agree (block text of n tokens is a prefix of the same block with
more tokens).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentbench.prompts.vocab import WordVocab
from agentbench.traces import words as tokenize
from agentbench.traces.model import Turn, common_prefix

#: Salt of the opt-in shared prefix (the same for every copy, so it is shared on purpose).
SHARED_PREFIX_SALT = 0x5A4ED
_CONTENT = "@@AB_CONTENT@@"
_MAX_TOKENS = "@@AB_MAX_TOKENS@@"


def salt_for(seed: int, copy: int, scope: str) -> int:
    """The block salt of one trace copy within one hash scope (48 bits, stable across runs)."""
    h = hashlib.blake2b(f"{seed}\x00{copy}\x00{scope}".encode(), digest_size=6).digest()
    return int.from_bytes(h, "little")


def tail_key(session_id: str, turn: int) -> int:
    """Key of a turn's unique tail: no other request of the copy shares it."""
    h = hashlib.blake2b(f"{session_id}\x00{turn}".encode(), digest_size=6).digest()
    return int.from_bytes(h, "little")


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of a prompt: ``n`` tokens of block ``key`` (a hash id), or of a unique tail
    (``tail=True``) or of the shared prefix (``shared=True``)."""

    key: int
    n: int
    tail: bool = False
    shared: bool = False


def layout(turn: Turn, session_id: str, overhead: int, shared_prefix: int,
           next_turn: Turn | None = None) -> list[Segment]:
    """Segments of a turn's prompt content: shared prefix, blocks, tail, with
    ``overhead + shared_prefix`` tokens taken off the end so the total stays the trace's
    input tokens.

    Tokens past the last hash id (sources that hash only whole blocks) are the start of
    the blocks the session's next turn adds when that turn extends this one (so turn k+1
    starts with turn k's prompt byte for byte, as a growing conversation does); otherwise
    unique text no other request shares.
    """
    n, bs = turn.input_tokens, turn.block_size
    segs: list[Segment] = []
    if shared_prefix:
        segs.append(Segment(0, shared_prefix, shared=True))
    n_full = min(len(turn.hash_ids), n // bs)
    segs.extend(Segment(int(h), bs) for h in turn.hash_ids[:n_full])
    segs.extend(rest_segments(turn, session_id, next_turn, n_full))
    trim_end(segs, overhead + shared_prefix)
    return segs


def trim_end(segs: list[Segment], cut: int) -> int:
    """Take ``cut`` tokens off the end of ``segs`` (in place), never into the shared
    prefix; return the tokens still to cut when the segments ran out."""
    while cut > 0 and segs:
        last = segs[-1]
        if last.shared:
            break
        if last.n > cut:
            segs[-1] = Segment(last.key, last.n - cut, last.tail)
            return 0
        cut -= last.n
        segs.pop()
    return cut


def rest_segments(turn: Turn, session_id: str, next_turn: Turn | None,
                  n_full: int) -> list[Segment]:
    """The segments after a turn's ``n_full`` whole blocks: a cut last block, then the tail
    (tokens past the last hash id), see ``layout``."""
    n, bs, ids = turn.input_tokens, turn.block_size, turn.hash_ids
    m = len(ids)
    segs = [Segment(int(ids[i]), n - i * bs) for i in range(n_full, m)]
    left = n - m * bs
    if left > 0 and next_turn is not None and next_turn.block_size == bs \
            and len(next_turn.hash_ids) > m and common_prefix(next_turn.hash_ids, ids) == m:
        nids, nn = next_turn.hash_ids, next_turn.input_tokens
        j = m
        while left > 0 and j < len(nids):
            room = min(bs, nn - j * bs)
            take = min(left, room)
            segs.append(Segment(int(nids[j]), take))
            left -= take
            j += 1
            if take < room:
                break
    if left > 0:
        segs.append(Segment(tail_key(session_id, turn.turn), left, tail=True))
    return segs


def tail_layout(turn: Turn, session_id: str, next_turn: Turn | None, n_full: int,
                cut: int) -> tuple[int, list[Segment]]:
    """What follows a turn's leading whole blocks once ``cut`` tokens (template, shared
    prefix) are taken off the end, as ``layout`` does: (whole blocks kept, segments after
    them). A cut that reaches into the whole blocks (a tiny tail) drops them from the end
    and leaves the last one cut."""
    segs = rest_segments(turn, session_id, next_turn, n_full)
    left = trim_end(segs, cut)
    keep, bs = n_full, turn.block_size
    while left > 0 and keep > 0:
        keep -= 1
        if bs > left:
            segs = [Segment(int(turn.hash_ids[keep]), bs - left)]
            left = 0
        else:
            left -= bs
    return keep, segs


#: the APIs whose prompt is text in one user message (``agentbench.transport.apis``)
MESSAGE_APIS = frozenset({"chat", "responses", "messages"})
#: body fields the replay writes itself (the prompt's field, the streaming switch) or that
#: would add to the prompt the trace describes, per API
_RESERVED = {"chat": ("messages", "prompt", "stream"),
             "completions": ("messages", "prompt", "stream"),
             "responses": ("input", "instructions", "messages", "prompt", "stream"),
             "messages": ("messages", "system", "prompt", "stream")}


class BlockCache:
    """Pre-encoded fragments of blocks, one store per salt so a finished trace copy's blocks
    can be dropped (``release``) and memory follows the live trees. Full blocks are keyed
    by hash id alone; cut blocks by (hash id, tokens); unique tails are never kept.

    A chat fragment is the block's text (synthetic words: ASCII letters and spaces, already
    JSON-safe); a completions fragment is its token ids, each followed by a comma."""

    def __init__(self, api: str, vocab: WordVocab | None = None) -> None:
        if api not in (*MESSAGE_APIS, "completions"):
            raise ValueError(f"unknown api {api!r}")
        # responses and messages prompts are chat's text blocks, in their own envelope
        self.api = "chat" if api in MESSAGE_APIS else api
        self.vocab = vocab
        self._full: dict[int, dict[int, bytes]] = {}
        self._cut: dict[int, dict[tuple[int, int], bytes]] = {}
        self._refs: dict[int, int] = {}

    def acquire(self, salt: int) -> None:
        self._refs[salt] = self._refs.get(salt, 0) + 1

    def release(self, salt: int) -> None:
        left = self._refs.get(salt, 0) - 1
        if left <= 0:
            self._refs.pop(salt, None)
            self._full.pop(salt, None)
            self._cut.pop(salt, None)
        else:
            self._refs[salt] = left

    def n_fragments(self) -> int:
        return sum(map(len, self._full.values())) + sum(map(len, self._cut.values()))

    def full(self, salt: int, hash_id: int, block_size: int) -> bytes:
        """The fragment of a whole block."""
        d = self._full.get(salt)
        if d is None:
            d = self._full[salt] = {}
        frag = d.get(hash_id)
        if frag is None:
            frag = d[hash_id] = self._make(salt, hash_id, block_size, False)
        return frag

    def full_many(self, salt: int, hash_ids: np.ndarray, block_size: int) -> list[bytes]:
        """``[full(salt, h, block_size) for h in hash_ids]``; the new chat blocks generated
        in one pass (``tokenize.block_bytes``)."""
        d = self._full.get(salt)
        if d is None:
            d = self._full[salt] = {}
        keys = hash_ids.tolist()
        if self.api == "chat" and self.vocab is None:
            new = [h for h in dict.fromkeys(keys) if h not in d]
            if len(new) > 1:
                d.update(zip(new, tokenize.block_bytes(salt, new, block_size), strict=True))
        get = d.get
        out = list(map(get, keys))
        if None in out:  # blocks of another kind (completions, a server vocabulary)
            return [self.full(salt, h, block_size) for h in keys]
        return out  # type: ignore[return-value]

    def fragment(self, salt: int, seg: Segment, block_size: int = 0) -> bytes:
        if seg.shared:
            salt = SHARED_PREFIX_SALT
        if seg.tail:
            return self._make(salt, seg.key, seg.n, True)
        if seg.n == block_size:
            return self.full(salt, seg.key, block_size)
        d = self._cut.get(salt)
        if d is None:
            d = self._cut[salt] = {}
        k = (seg.key, seg.n)
        frag = d.get(k)
        if frag is None:
            frag = d[k] = self._make(salt, seg.key, seg.n, False)
        return frag

    def _make(self, salt: int, key: int, n: int, tail: bool) -> bytes:
        if self.vocab is not None:  # the server tokenizer's own single-token words
            draw = tokenize.block_token_ids(salt ^ 0x5EED_0000_0000 if tail else salt, key, n)
            idx = np.asarray(draw, dtype=np.int64) % len(self.vocab.words)
            if self.api == "chat":
                return "".join(self.vocab.words[idx]).encode("ascii")
            return "".join(f"{i}," for i in self.vocab.ids[idx].tolist()).encode("ascii")
        if self.api == "chat":
            text = tokenize.unique_text(salt, key, n) if tail else tokenize.block_text(salt, key,
                                                                                      n)
            return text.encode("ascii")
        ids = tokenize.block_token_ids(salt ^ 0x5EED_0000_0000 if tail else salt, key, n)
        return "".join(f"{i}," for i in ids).encode("ascii")

    def fragments(self, salt: int, segs: Sequence[Segment], block_size: int = 0) -> list[bytes]:
        return [self.fragment(salt, s, block_size) for s in segs]

    def content(self, salt: int, segs: Sequence[Segment], block_size: int = 0) -> bytes:
        """The prompt content: text (chat) or comma-separated token ids (completions)."""
        body = b"".join(self.fragments(salt, segs, block_size))
        return body[:-1] if self.api == "completions" and body else body


class SessionPrompt:
    """One session's prompts for one API: the fragments of its leading whole blocks are kept
    from turn to turn, so a turn that extends the previous one costs only its new blocks
    (a 142K-token turn is a list of ~2,200 references, joined once into the body)."""

    def __init__(self, cache: BlockCache, salt: int, session_id: str, overhead: int,
                 shared_prefix: int) -> None:
        self.cache = cache
        self.salt = salt
        self.session_id = session_id
        self.overhead = overhead
        self.shared_prefix = shared_prefix
        self._ids: np.ndarray = np.zeros(0, dtype=np.int64)
        self._frags: list[bytes] = []

    def build(self, turn: Turn, next_turn: Turn | None) -> list[bytes]:
        """Fragments of ``turn``'s content, equal to ``fragments(layout(...))``."""
        ids, bs = turn.hash_ids, turn.block_size
        n_full = min(len(ids), turn.input_tokens // bs)
        have = len(self._ids)
        if not (have <= n_full and np.array_equal(ids[:have], self._ids)):
            have = 0
            self._frags = []
        cache, salt = self.cache, self.salt
        frags = self._frags
        if n_full > have:
            frags.extend(cache.full_many(salt, ids[have:n_full], bs))
        self._ids = ids[:n_full]
        keep, segs = tail_layout(turn, self.session_id, next_turn, n_full,
                                 self.overhead + self.shared_prefix)
        out = frags[:keep] if keep < n_full else frags[:]
        out.extend(cache.fragment(salt, sg, bs) for sg in segs)
        if self.shared_prefix:
            out.insert(0, cache.fragment(salt, Segment(0, self.shared_prefix, shared=True), bs))
        return out


@dataclass(frozen=True, slots=True)
class BodyTemplate:
    """A request body split around the parts that change per request, pre-encoded once per
    endpoint: ``head + content + mid + max_tokens + tail``."""

    head: bytes
    mid: bytes
    tail: bytes
    comma_fragments: bool = False  # completions: fragments end with "," (drop the last)

    def render(self, content: bytes, max_tokens: int) -> bytes:
        return b"".join((self.head, content, self.mid, str(max_tokens).encode(), self.tail))

    def render_fragments(self, frags: list[bytes], max_tokens: int) -> bytes:
        """The body from content fragments, in one join (one copy of the prompt)."""
        return b"".join(self.parts(frags, max_tokens))

    def parts(self, frags: list[bytes], max_tokens: int) -> list[bytes]:
        """The body as a list of byte strings (not joined)."""
        if self.comma_fragments and frags:
            parts = [self.head, *frags[:-1], frags[-1][:-1]]
        else:
            parts = [self.head, *frags]
        parts.append(self.mid)
        parts.append(self._tail(max_tokens))
        return parts

    def _tail(self, max_tokens: int) -> bytes:
        return str(max_tokens).encode() + self.tail


def body_template(api: str, model: str, extra_body: dict[str, Any],
                  ignore_eos: bool) -> BodyTemplate:
    """Pre-encode the fixed fields of every body (``extra_body`` may override them, not the
    prompt's field, ``stream`` or ``instructions``/``system``, which would change the
    prompt the trace describes). Chat and messages send one user message, responses one
    ``input`` message (``store: false``: the server keeps nothing), completions the prompt
    as token ids (docs/architecture.md#apis)."""
    fields: dict[str, Any] = {"model": model}
    if api in ("chat", "messages"):
        fields["messages"] = [{"role": "user", "content": _CONTENT}]
    elif api == "responses":
        fields["input"] = [{"role": "user", "content": _CONTENT}]
    elif api == "completions":
        fields["prompt"] = _CONTENT
    else:
        raise ValueError(f"unknown api {api!r}")
    fields["max_output_tokens" if api == "responses" else "max_tokens"] = _MAX_TOKENS
    if ignore_eos:
        fields["min_tokens"] = _MAX_TOKENS
        fields["ignore_eos"] = True
    fields["stream"] = True
    if api in ("chat", "completions"):
        fields["stream_options"] = {"include_usage": True}
    if api == "responses":
        fields["store"] = False
    for k, v in extra_body.items():
        if k in _RESERVED[api]:
            raise ValueError(f"extra_body may not set {k!r}")
        fields[k] = v
    text = json.dumps(fields, separators=(",", ":"))
    content_ph = f'"{_CONTENT}"'
    head, rest = text.split(content_ph, 1)
    if api != "completions":
        head += '"'
        rest = '"' + rest
    else:
        head += "["
        rest = "]" + rest
    max_ph = f'"{_MAX_TOKENS}"'
    if max_ph in rest:
        mid, tail = rest.split(max_ph, 1)
        tail_b = tail.replace(max_ph, "{MAXTOK}")
    else:  # extra_body replaced max_tokens with a fixed value
        mid, tail_b = rest, ""
    if "{MAXTOK}" in tail_b:
        # min_tokens repeats max_tokens: keep it as a second slot rendered by RepeatTemplate
        return _TwoSlotTemplate(head.encode(), mid.encode(), tail_b.encode(),
                                api == "completions")
    return BodyTemplate(head.encode(), mid.encode(), tail_b.encode(), api == "completions")


@dataclass(frozen=True, slots=True)
class _TwoSlotTemplate(BodyTemplate):
    """A body whose ``min_tokens`` repeats ``max_tokens``."""

    def render(self, content: bytes, max_tokens: int) -> bytes:
        return b"".join((self.head, content, self.mid, self._tail(max_tokens)))

    def _tail(self, max_tokens: int) -> bytes:
        n = str(max_tokens).encode()
        return n + self.tail.replace(b"{MAXTOK}", n)


def chat_overhead() -> int:
    """Template tokens of a one-message chat request."""
    return tokenize.CHAT_TOKENS_PER_MESSAGE + tokenize.CHAT_TOKENS_REPLY_PRIMER


def decode_chat_content(body: bytes) -> str:
    """The user message content of a chat body (tests and checks; not on the hot path)."""
    return str(json.loads(body)["messages"][0]["content"])


def decode_prompt_ids(body: bytes) -> np.ndarray:
    return np.asarray(json.loads(body)["prompt"], dtype=np.int64)
