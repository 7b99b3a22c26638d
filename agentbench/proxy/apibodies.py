"""Responses and Messages request bodies as the recorder's messages (docs/record.md): the
same ``(role, text, tool call ids)`` a chat body gives, so one digest chain and one prompt
layout serve all three APIs.

- **Responses** (``POST .../responses``): ``instructions`` is a system message; ``input``
  is one user message (a string) or a list of items. Consecutive items the model produced
  (an assistant ``message``, ``reasoning``, ``function_call``, ``custom_tool_call``) are one
  assistant message: its text the ``output_text`` parts, its tool call ids the items'
  ``call_id`` s, as the response that produced them streamed them. A
  ``function_call_output`` is a ``tool`` message.
- **Messages** (``POST .../messages``): ``system`` (a string or text blocks) is a system
  message; each message's text is its ``text`` blocks and the text of its
  ``tool_result`` blocks; its tool call ids those of its ``tool_use`` blocks.

The digest takes the visible text and the call ids only (reasoning, thinking blocks and a
tool call's arguments are re-sent, or not, at the agent's choice); the prompt's tokens take
everything the model reads: reasoning summaries, thinking, tool call names and arguments.
A block or message marked with ``cache_control`` (Anthropic's prompt-cache breakpoint)
is noted by its message's index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentbench.errors import InputError
from agentbench.traces.readers._text import content_text

#: Responses items the model produced (folded into one assistant message)
_MODEL_ITEMS = frozenset({"reasoning", "function_call", "custom_tool_call",
                          "web_search_call", "local_shell_call"})


@dataclass(slots=True)
class Message:
    """One message as the recorder sees it."""

    role: str
    text: str  # the digest's text: what the agent shows
    call_ids: str  # comma-joined tool call ids
    extra: str = ""  # read by the model, not part of the digest (reasoning, arguments)
    cache_mark: bool = False  # a cache_control breakpoint falls in this message


def api_of(path: str) -> str:
    """The API of a recorded call's path."""
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "messages"
    return "completions" if path.endswith("/completions") and not path.endswith(
        "/chat/completions") else "chat"


def _texts(parts: Any, kinds: tuple[str, ...]) -> str:
    """The text of a string or of the listed kinds of content parts."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return "" if parts is None else json.dumps(parts, sort_keys=True)
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, dict) and p.get("type") in kinds and isinstance(p.get("text"), str):
            out.append(p["text"])
    return "".join(out)


def _marked(parts: Any) -> bool:
    return isinstance(parts, list) and any(isinstance(p, dict) and p.get("cache_control")
                                           for p in parts)


def tools_text(body: dict[str, Any]) -> str:
    tools = body.get("tools")
    return json.dumps(tools, sort_keys=True) if tools else ""


def responses_messages(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    if body.get("instructions"):
        out.append(Message("system", _texts(body["instructions"], ("input_text",)), ""))
    inp = body.get("input")
    if isinstance(inp, str):
        return [*out, Message("user", inp, "")]
    if not isinstance(inp, list):
        return out
    turn: Message | None = None  # the assistant message being folded
    for item in inp:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        r = item.get("role")
        role = r if isinstance(r, str) else "user"
        if kind in _MODEL_ITEMS or (kind == "message" and role == "assistant"):
            if turn is None:
                turn = Message("assistant", "", "")
                out.append(turn)
            if kind == "message":
                turn.text += _texts(item.get("content"), ("output_text", "text"))
            elif kind == "reasoning":
                turn.extra += "".join(_texts(s.get("text"), ()) for s in
                                      item.get("summary") or () if isinstance(s, dict))
            else:
                cid = str(item.get("call_id") or item.get("id") or "")
                turn.call_ids = f"{turn.call_ids},{cid}" if turn.call_ids else cid
                turn.extra += str(item.get("name") or "") + str(
                    item.get("arguments") or item.get("input") or "")
            continue
        turn = None
        if kind in ("function_call_output", "custom_tool_call_output"):
            out.append(Message("tool", _texts(item.get("output"), ("input_text",
                                                                  "output_text")), ""))
        else:
            out.append(Message(role, _texts(item.get("content"), ("input_text", "text",
                                                                  "output_text")), ""))
    return out


def messages_messages(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    system = body.get("system")
    if system:
        out.append(Message("system", _texts(system, ("text",)), "",
                           cache_mark=_marked(system)))
    messages = body.get("messages")
    for m in messages if isinstance(messages, list) else ():
        if not isinstance(m, dict):
            continue
        role = m["role"] if isinstance(m.get("role"), str) else "user"
        content = m.get("content")
        if not isinstance(content, list):
            out.append(Message(role, _texts(content, ("text",)), ""))
            continue
        text, ids, extra = [], [], []
        for b in content:
            if not isinstance(b, dict):
                continue
            kind = b.get("type")
            if kind == "text" and isinstance(b.get("text"), str):
                text.append(b["text"])
            elif kind == "tool_result":
                text.append(_texts(b.get("content"), ("text",)))
            elif kind == "tool_use":
                ids.append(str(b.get("id") or ""))
                extra.append(str(b.get("name") or "")
                             + json.dumps(b.get("input"), sort_keys=True))
            elif kind == "thinking" and isinstance(b.get("thinking"), str):
                extra.append(b["thinking"])
        out.append(Message(role, "".join(text), ",".join(ids), "".join(extra),
                           cache_mark=_marked(content)))
    return out


def chat_messages(body: dict[str, Any]) -> list[Message]:
    """A chat body's messages: the content's text (a content the text reader refuses, as
    its JSON), the ids of its ``tool_calls``, their JSON read by the model."""
    out: list[Message] = []
    messages = body.get("messages")
    for m in messages if isinstance(messages, list) else ():
        if not isinstance(m, dict):
            continue
        role = m["role"] if isinstance(m.get("role"), str) else "user"
        try:
            text = content_text(m.get("content"))
        except InputError:
            text = json.dumps(m.get("content"), sort_keys=True)
        calls = m.get("tool_calls")
        out.append(Message(role, text, _call_ids(calls),
                           json.dumps(calls, sort_keys=True) if calls else ""))
    return out


def _call_ids(tool_calls: Any) -> str:
    if not isinstance(tool_calls, list):
        return ""
    return ",".join(str(tc.get("id", "")) for tc in tool_calls if isinstance(tc, dict))


def body_messages(api: str, body: dict[str, Any]) -> list[Message]:
    """The messages of a chat, Responses or Messages body."""
    if api == "responses":
        return responses_messages(body)
    return messages_messages(body) if api == "messages" else chat_messages(body)


def tools_marked(body: dict[str, Any]) -> bool:
    """Whether the last tool carries a cache_control breakpoint (Messages)."""
    tools = body.get("tools")
    return isinstance(tools, list) and bool(tools) and isinstance(tools[-1], dict) \
        and bool(tools[-1].get("cache_control"))
