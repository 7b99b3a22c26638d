"""What a relayed response said, as a record (:class:`Reply`), and the reading of a
non-streamed body into one: chat or completions (``choices[0].message``), Responses
(``output`` items) or Messages (``content`` blocks). The reader that takes a response as
it comes, streamed or not, is :class:`agentbench.proxy.reply.ReplyReader`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from agentbench.transport.typed_sse import usage_counts


def part_hash(text: str) -> bytes:
    """The hash of one digest part (``calls._digest``); the same whether the text is
    hashed whole or piece by piece (``ReplyReader``)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass(slots=True)
class Reply:
    """What a response said: usage, the assistant text (at most ``reply.TEXT_CAP``
    characters of it; ``text_chars`` and ``text_hash`` are of all of it) and tool calls."""

    usage: dict[str, Any] | None = None
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    text_chars: int = 0
    text_hash: bytes = field(default_factory=lambda: part_hash(""))
    #: characters of text and arguments kept, and in all
    kept_chars: int = 0
    all_chars: int = 0
    #: text the model made that is not in ``text``'s hash (Responses and Messages:
    #: reasoning and thinking; agents may or may not send it back), kept for counting
    extra: str = ""
    #: the stream failed after its 200 (an ``error`` event, ``response.failed``, a chat
    #: ``{"error": ...}`` chunk): what it said, cut short; None when it did not
    stream_error: str | None = None
    #: read as a stream (SSE) or as one JSON body; None: not read (no body)
    streamed: bool | None = None


def whole_reply(body: bytes) -> Reply:
    """The reply of one JSON body (``choices[0].message``)."""
    out = Reply()
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # nested past the reader: a reply of nothing
        return out
    if not isinstance(doc, dict):
        return out
    if isinstance(doc.get("model"), str):
        out.model = doc["model"]
    if doc.get("object") == "response" or doc.get("type") == "message":
        return _whole_typed(doc, out)
    if isinstance(doc.get("usage"), dict):
        out.usage = doc["usage"]
    choices = doc.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        ch = choices[0]
        msg: dict[str, Any] = ch["message"] if isinstance(ch.get("message"), dict) else ch
        parts = [msg.get(k) for k in ("reasoning_content", "reasoning", "content", "text")]
        text = "".join(p for p in parts if isinstance(p, str))
        out.text, out.text_chars, out.text_hash = text, len(text), part_hash(text)
        for tc in msg.get("tool_calls") or ():
            if isinstance(tc, dict):
                fn: dict[str, Any] = tc["function"] if isinstance(tc.get("function"),
                                                                  dict) else {}
                out.tool_calls.append({"id": str(tc.get("id") or ""),
                                       "args": str(fn.get("name") or "")
                                       + str(fn.get("arguments") or "")})
    out.all_chars = out.kept_chars = out.text_chars + sum(len(c["args"])
                                                         for c in out.tool_calls)
    return out


def _whole_typed(doc: dict[str, Any], out: Reply) -> Reply:
    """The reply of a Responses (``output`` items) or Messages (``content`` blocks) body."""
    api = "responses" if doc.get("object") == "response" else "messages"
    if isinstance(doc.get("usage"), dict):
        out.usage = chat_usage(api, doc["usage"])
    texts, extra = [], []
    for it in (doc.get("output") if api == "responses" else doc.get("content")) or ():
        if not isinstance(it, dict):
            continue
        kind = it.get("type")
        if kind == "message":
            texts += [p["text"] for p in it.get("content") or () if isinstance(p, dict)
                      and p.get("type") == "output_text" and isinstance(p.get("text"), str)]
        elif kind == "text" and isinstance(it.get("text"), str):
            texts.append(it["text"])
        elif kind in ("function_call", "custom_tool_call", "tool_use"):
            args = it.get("arguments") if kind == "function_call" else it.get("input")
            out.tool_calls.append({
                "id": str(it.get("call_id") or it.get("id") or ""),
                "args": str(it.get("name") or "") + (args if isinstance(args, str)
                                                     else json.dumps(args, sort_keys=True))})
        elif kind == "thinking" and isinstance(it.get("thinking"), str):
            extra.append(it["thinking"])
        elif kind == "reasoning":
            extra += [s["text"] for s in it.get("summary") or () if isinstance(s, dict)
                      and isinstance(s.get("text"), str)]
    text = "".join(texts)
    out.text, out.text_chars, out.text_hash = text, len(text), part_hash(text)
    out.extra = "".join(extra)
    out.all_chars = out.kept_chars = out.text_chars + len(out.extra) + sum(
        len(c["args"]) for c in out.tool_calls)
    return out


def chat_usage(api: str, usage: dict[str, Any]) -> dict[str, Any]:
    """A Responses or Messages ``usage`` in chat's keys (``prompt_tokens`` the whole prompt,
    cache reads and writes included; ``prompt_tokens_details.cached_tokens`` the reads),
    counts the API did not give left out."""
    prompt, cached, output = usage_counts(api, usage)
    out: dict[str, Any] = {}
    if prompt is not None:
        out["prompt_tokens"] = prompt
    if output is not None:
        out["completion_tokens"] = output
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out
