"""One recorded LLM call, and how a request/response pair becomes one.

The proxy only stamps times and keeps the bytes; :class:`Analyzer` turns them into a
:class:`Call` after the response has been relayed: token counts (the server's ``usage``
when it sent one, else counted with the tokenizer), block hash ids of the prompt, and the
message digests sessionizing needs. No prompt or response text is kept unless
``keep_text``.

Prompt layout (the ``openai-log`` reader's, so a recording and a request log of the same
traffic hash alike): the tool schemas as one block of text, then each message as
``<role> content+tool_calls <end>``, then the reply primer ``<assistant>``, tokenized with
``agentbench.traces.words`` (or a named tokenizer) and cut into prefix-chained blocks of
``block_size`` (64) tokens. A completions prompt is its text (or its token ids).

Message digests: ``d_0 = H(0, h(tools))``, ``d_i = H(d_{i-1}, h(role), h(content),
h(tool call ids))`` with ``h`` the hash of one part (``replybody.part_hash``, so a response's
text is hashed as it arrives); ``reply`` is the same chain extended by the response as an
assistant message. A later
call whose digests contain a call's ``reply`` carries that call's prompt + response.
Tool call *ids* go in, their argument JSON does not (agents re-serialize it).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from agentbench.proxy.apibodies import api_of, body_messages, tools_marked, tools_text
from agentbench.proxy.reply import ResponseTap, parse_response
from agentbench.proxy.replybody import Reply, part_hash
from agentbench.traces import MAX_TOKENS
from agentbench.traces.readers._text import (
    OTHER_ROLE_ID,
    PromptHasher,
    message_token_ids,
    primer_ids,
)
from agentbench.traces.tokenizers import get_tokenizer


@dataclass(slots=True)
class Call:
    """One relayed LLM call: times in integer ns from the recorder's start (one
    ``perf_counter_ns`` clock), counts, hash ids and digests; text only with keep_text."""

    index: int
    path: str
    model: str | None
    stream: bool
    status: int
    arrival_ns: int
    first_byte_ns: int | None
    end_ns: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int | None
    usage_reported: bool
    counted_input_tokens: int
    hash_ids: list[int]
    block_size: int
    prefixes: list[int]  # message digest chain of the prompt
    reply: int  # the chain extended by the response
    session_key: str | None = None
    parent_key: str | None = None
    error: str | None = None
    request_text: str | None = None  # the request body's messages/prompt/tools (keep_text)
    response_text: str | None = None
    #: prompt tokens before each Anthropic cache_control breakpoint (at the end of the
    #: message, system prompt or tool list that carries it); None: the call marked none
    cache_breakpoints: list[int] | None = None
    #: the stream failed after its 2xx (an error event): not a turn
    stream_error: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and self.stream_error is None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Call:
        return cls(**d)


def _chain(prev: int, *parts: bytes) -> int:
    h = hashlib.blake2b(prev.to_bytes(8, "little"), digest_size=8)
    for p in parts:
        h.update(p)
    return int.from_bytes(h.digest(), "little") >> 1  # int63: fits parquet/JSON int64


def _digest(prev: int, *parts: str) -> int:
    """The next digest of a chain: ``prev`` and the hash of each part."""
    return _chain(prev, *map(part_hash, parts))


def _int(d: Any, *keys: str) -> int | None:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d if isinstance(d, int) and not isinstance(d, bool) and d >= 0 else None


#: the note on a Responses call that continues a stored response (``store: true``)
CHAINED_NOTE = ("previous_response_id: the earlier items live on the server; hash ids cover "
                "this call's own items only")

_USAGE = (("prompt_tokens",), ("completion_tokens",), ("prompt_tokens_details", "cached_tokens"),
          ("cache_read_input_tokens",))


def _usage_problem(usage: dict[str, Any]) -> str | None:
    """Which usage count no request can have (over ``MAX_TOKENS``), if any."""
    for keys in _USAGE:
        n = _int(usage, *keys)
        if n is not None and n > MAX_TOKENS:
            return f"usage {'.'.join(keys)} = {n} is over {MAX_TOKENS:,} tokens"
    return None


class Analyzer:
    """Counts, hashes and digests calls; caches each message's token ids so an agent's
    growing context is tokenized once per new message, not once per call."""

    def __init__(self, *, block_size: int = 64, tokenizer: str | None = None,
                 keep_text: bool = False, cache_messages: int = 1 << 15) -> None:
        self.block_size = block_size
        self.keep_text = keep_text
        self._tok = get_tokenizer(tokenizer)
        self._cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._cache_max = cache_messages

    def _encode(self, role: str, text: str) -> np.ndarray:
        key = (role, text)
        ids = self._cache.get(key)
        if ids is None:
            ids = np.asarray(message_token_ids(self._tok.encode(text), role), dtype=np.int64)
            self._cache[key] = ids
            if len(self._cache) > self._cache_max:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return ids

    def _count(self, reply: Reply) -> int:
        """Output tokens of a reply without usage, by the tokenizer; past the text kept
        (``reply.TEXT_CAP``), in proportion to the characters."""
        text = reply.text + reply.extra + "".join(c["args"] for c in reply.tool_calls)
        n = len(self._tok.encode(text)) if text else 0
        if reply.all_chars > reply.kept_chars > 0:
            n = round(n * reply.all_chars / reply.kept_chars)
        return n

    def message_prompt(self, api: str, body: dict[str, Any]
                       ) -> tuple[np.ndarray, list[int], list[int]]:
        """(prompt token ids, message digest chain, cache breakpoints) of a chat, Responses
        or Messages body (its messages as ``agentbench.proxy.apibodies`` reads them): the
        tool schemas as one block, then each message's tokens, then the reply primer."""
        tools = tools_text(body)
        d = _digest(0, "tools", tools)
        parts = [np.asarray([OTHER_ROLE_ID, *self._tok.encode(tools)], dtype=np.int64)
                 ] if tools else []
        n = len(parts[0]) if parts else 0
        marks = [n] if tools and tools_marked(body) else []
        chain = []
        for m in body_messages(api, body):
            d = _digest(d, m.role, m.text, m.call_ids)
            chain.append(d)
            ids = self._encode(m.role, m.text + m.extra)
            parts.append(ids)
            n += len(ids)
            if m.cache_mark:
                marks.append(n)
        parts.append(np.asarray(primer_ids(), dtype=np.int64))
        return np.concatenate(parts), chain, marks

    def prompt(self, body: dict[str, Any]) -> tuple[np.ndarray, list[int]]:
        """(prompt token ids, message digest chain) of a chat or completions body."""
        if isinstance(body.get("messages"), list):
            ids, chain, _ = self.message_prompt("chat", body)
            return ids, chain
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            ids = np.asarray(prompt, dtype=np.int64)
            return ids, [_digest(0, "prompt-ids", ids.tobytes().hex())]
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
        return np.asarray(self._tok.encode(text), dtype=np.int64), [_digest(0, "prompt", text)]

    def call(self, *, index: int, path: str, body_bytes: bytes, status: int,
             arrival_ns: int, first_byte_ns: int | None, end_ns: int,
             response: bytes | ResponseTap, encoding: str | None, session_key: str | None,
             parent_key: str | None, error: str | None = None) -> Call:
        """The ``Call`` of one relayed request (an unreadable body counts as empty; usage
        no request can have is not taken: the counts come from the tokenizer, and
        ``error`` says so)."""
        try:
            body = json.loads(body_bytes)
        except (ValueError, RecursionError):  # RecursionError: nested past the reader
            body = {}
        if not isinstance(body, dict):
            body = {}
        # only JSON true asks for a stream, the API's boolean; another value ("yes", 1) is
        # refused by some servers, read as false or as true by others: stored as the
        # upstream answered it (its first byte), an error as no stream
        asked = body.get("stream")
        stream: bool | None = asked if isinstance(asked, bool) else (
            None if asked is not None else False)
        api = api_of(path)
        marks: list[int] | None = None
        if api in ("responses", "messages"):
            tokens, chain, marks = self.message_prompt(api, body)
        else:
            tokens, chain = self.prompt(body)
        reply = Reply()
        if 200 <= status < 300:  # read as the upstream answered, whatever was asked: a
            # JSON body to "stream": true (a server that does not stream) read as SSE lost
            # its usage (a response past SPILL_BYTES was read so already)
            reply = (response.reply(None) if isinstance(response, ResponseTap)
                     else parse_response(response, encoding, None))
        stream = bool(reply.streamed) if stream is None else stream
        if api == "responses" and body.get("previous_response_id"):
            # the earlier context lives on the server: this call's hash ids cover only its
            # own items (its prompt tokens still come from usage); sessions chain by the id
            # nowhere, so each such call starts a session of its own
            error = "; ".join(e for e in (error, CHAINED_NOTE) if e)
        usage = reply.usage or {}
        if (problem := _usage_problem(usage)) is not None:
            usage = {}
            error = "; ".join(e for e in (error, f"{problem}; counted with the tokenizer") if e)
        chat = isinstance(body.get("messages"), list) or api == "responses"
        reply_digest = _chain(chain[-1] if chain else 0,
                              part_hash("assistant" if chat else "reply"), reply.text_hash,
                              part_hash(",".join(c["id"] for c in reply.tool_calls)))
        prompt_tokens = _int(usage, "prompt_tokens")
        input_tokens = prompt_tokens if prompt_tokens is not None else len(tokens)
        out_tokens = _int(usage, "completion_tokens")
        if out_tokens is None:
            out_tokens = self._count(reply)
        cached = _int(usage, "prompt_tokens_details", "cached_tokens")
        if cached is None:  # Anthropic-style gateways
            cached = _int(usage, "cache_read_input_tokens")
        bs = self.block_size
        ids = PromptHasher(bs).hash_ids(tokens)[: -(-input_tokens // bs)]
        model = body.get("model") if isinstance(body.get("model"), str) else reply.model
        keep = {k: body[k] for k in ("instructions", "system", "input", "messages", "prompt",
                                     "tools") if k in body}
        return Call(
            index=index, path=path, model=model, stream=stream, status=status,
            arrival_ns=arrival_ns, first_byte_ns=first_byte_ns, end_ns=end_ns,
            input_tokens=input_tokens, output_tokens=out_tokens,
            cached_tokens=None if cached is None else min(cached, input_tokens),
            usage_reported=prompt_tokens is not None, counted_input_tokens=len(tokens),
            hash_ids=[int(h) for h in ids], block_size=bs, prefixes=chain,
            reply=reply_digest, session_key=session_key, parent_key=parent_key, error=error,
            request_text=json.dumps(keep) if self.keep_text else None,
            response_text=reply.text if self.keep_text else None,
            cache_breakpoints=_marks(marks, input_tokens, len(tokens)),
            stream_error=reply.stream_error,
        )


def _marks(marks: list[int] | None, input_tokens: int, counted: int) -> list[int] | None:
    """Breakpoints (positions in the recorder's token layout) in the prompt's tokens as the
    trace counts them (the server's usage when it sent one): scaled by the two counts,
    so a server that counts fewer tokens keeps every breakpoint."""
    if not marks:
        return None
    if counted <= 0 or counted == input_tokens:
        return list(marks)
    return [min(input_tokens, round(m * input_tokens / counted)) for m in marks]

