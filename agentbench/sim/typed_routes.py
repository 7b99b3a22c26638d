"""The simulator's Responses (``POST /v1/responses``) and Messages (``POST /v1/messages``)
routes, each streaming its own typed events (docs/architecture.md#apis), so that every
path a replay can take is testable without a real engine.

Both count a prompt as chat does (``instructions``/``system`` as a system message first,
then each message's text; ``agentbench.traces.words.chat_prompt_tokens``), so a turn sent
through any of the three message APIs has the same prompt and cached tokens.

- Responses, shaped like vLLM's: ``response.created``, ``response.in_progress``,
  ``response.output_item.added``, ``response.content_part.added``, one
  ``response.output_text.delta`` per token, the ``.done`` events, then
  ``response.completed`` whose ``response.status`` is ``incomplete`` when the output limit
  (``max_output_tokens``) ended it; ``usage`` has ``input_tokens``,
  ``input_tokens_details.cached_tokens``, ``output_tokens``.
- Messages, shaped like Anthropic's: ``message_start`` (usage with ``input_tokens`` not
  counting the ``cache_read_input_tokens``), ``content_block_start``, one
  ``content_block_delta`` (``text_delta``) per token, ``content_block_stop``,
  ``message_delta`` (``stop_reason``, final ``output_tokens``), ``message_stop``;
  ``max_tokens`` is required and errors are ``{"type": "error", "error": {...}}``.

An engine that drops a request mid-stream sends an ``error`` event in either API.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

from agentbench.sim.cluster import Cluster
from agentbench.sim.engine import SimRequest
from agentbench.sim.routes_common import (
    ABORTED,
    CLUSTER,
    BadRequest,
    content,
    error,
    make,
    openai_reject,
    read_body,
    serve,
    token_ranges,
    word,
)


def anthropic_error(message: str, status: int = 400,
                     kind: str = "invalid_request_error") -> web.Response:
    return web.json_response({"type": "error", "error": {"type": kind, "message": message}},
                             status=status)


def _sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


# -- Responses ---------------------------------------------------------------------------

def _responses_pairs(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of each input item: messages by their text parts, tool calls by name
    and arguments (assistant), tool outputs (tool), reasoning by its summary (assistant)."""
    pairs = []
    if body.get("instructions") is not None:
        pairs.append(("system", content(body["instructions"], "instructions")))
    inp = body.get("input")
    if isinstance(inp, str):
        pairs.append(("user", inp))
    elif isinstance(inp, list) and inp:
        for i, item in enumerate(inp):
            if not isinstance(item, dict):
                raise BadRequest(f"input[{i}] must be an object")
            kind = item.get("type", "message")
            if kind == "message":
                role = item.get("role")
                pairs.append((role if isinstance(role, str) else "user",
                              content(item.get("content"), f"input[{i}].content")))
            elif kind in ("function_call", "custom_tool_call"):
                pairs.append(("assistant", str(item.get("name") or "")
                              + str(item.get("arguments") or item.get("input") or "")))
            elif kind in ("function_call_output", "custom_tool_call_output"):
                pairs.append(("tool", content(item.get("output"), f"input[{i}].output")))
            elif kind == "reasoning":
                pairs.append(("assistant", content(item.get("summary") or [],
                                                   f"input[{i}].summary")))
            else:
                raise BadRequest(f"input[{i}]: items of type {kind!r} are not supported by "
                                 "the simulator")
    else:
        raise BadRequest("input must be a string or a non-empty list of items")
    return pairs


def _response_obj(cluster: Cluster, req: SimRequest, rid: str, created: int,
                  status: str) -> dict[str, Any]:
    done = status != "in_progress"
    text = "".join(word(req, i) for i in range(req.generated)) if done else ""
    out: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": created, "model": cluster.cfg.model,
        "status": status, "incomplete_details": ({"reason": "max_output_tokens"}
                                                 if status == "incomplete" else None),
        "output": [{"id": f"msg_{rid}", "type": "message", "status": "completed",
                    "role": "assistant", "content": [{"type": "output_text", "text": text,
                                                      "annotations": []}]}] if done else [],
        "usage": None}
    if done:
        out["usage"] = {"input_tokens": req.prompt_tokens,
                        "input_tokens_details": {"cached_tokens": req.cached_tokens},
                        "output_tokens": req.generated,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": req.prompt_tokens + req.generated}
    return out


def _status(req: SimRequest) -> str:
    return "incomplete" if req.finish_reason == "length" else "completed"


async def responses(request: web.Request) -> web.StreamResponse:
    cluster = request.app[CLUSTER]
    try:
        body = await read_body(request, cluster)
        tokens = cluster.hasher.chat_tokens(_responses_pairs(body))
        req = make(cluster, request, body, tokens, "max_output_tokens")
    except BadRequest as e:
        return error(str(e), e.status, e.kind)
    rid, created = f"resp_sim{req.rid}", int(time.time())

    def whole(r: SimRequest) -> web.Response:
        return web.json_response(_response_obj(cluster, r, rid, created, _status(r)))

    async def stream(resp: web.StreamResponse, r: SimRequest, progress: asyncio.Event
                     ) -> None:
        seq = iter(range(1 << 62))
        item = f"msg_{rid}"

        def ev(kind: str, **data: Any) -> str:
            return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

        start = _response_obj(cluster, r, rid, created, "in_progress")
        await resp.write((ev("response.created", response=start)
                          + ev("response.in_progress", response=start)).encode())
        opened = False
        async for new in token_ranges(r, progress):
            parts = []
            if not opened:  # the item opens with its first token, as vLLM sends it
                opened = True
                parts.append(ev("response.output_item.added", output_index=0, item={
                    "id": item, "type": "message", "status": "in_progress",
                    "role": "assistant", "content": []}))
                parts.append(ev("response.content_part.added", item_id=item, output_index=0,
                                content_index=0, part={"type": "output_text", "text": "",
                                                       "annotations": []}))
            parts.extend(ev("response.output_text.delta", item_id=item, output_index=0,
                            content_index=0, delta=word(r, i), logprobs=[]) for i in new)
            await resp.write("".join(parts).encode())
        if r.aborted:
            await resp.write(ev("error", code="server_error", message=ABORTED,
                                param=None).encode())
            return
        final = _response_obj(cluster, r, rid, created, _status(r))
        text = final["output"][0]["content"][0]
        await resp.write((ev("response.output_text.done", item_id=item, output_index=0,
                             content_index=0, text=text["text"], logprobs=[])
                          + ev("response.content_part.done", item_id=item, output_index=0,
                               content_index=0, part=text)
                          + ev("response.output_item.done", output_index=0,
                               item=final["output"][0])
                          + ev("response.completed", response=final)).encode())

    return await serve(request, cluster, req, whole,
                       stream if body.get("stream") else None, openai_reject)


# -- Messages ----------------------------------------------------------------------------

def _blocks(value: Any, where: str) -> str:
    """A Messages content as text: text and thinking blocks, a tool_use's name and input, a
    tool_result's content."""
    if not isinstance(value, list):
        return content(value, where)
    out = []
    for j, b in enumerate(value):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "tool_use":
            out.append(str(b.get("name") or "") + json.dumps(b.get("input"), sort_keys=True))
        elif kind == "tool_result":
            out.append(content(b.get("content"), f"{where}.{j}.content"))
        elif kind == "thinking":
            out.append(str(b.get("thinking") or ""))
        else:
            out.append(content([b], where))
    return "".join(out)


def _messages_pairs(body: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    if body.get("system") is not None:
        pairs.append(("system", content(body["system"], "system")))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise BadRequest(f"messages.{i}: must be an object with role user or assistant")
        pairs.append((m["role"], _blocks(m.get("content"), f"messages.{i}.content")))
    if body.get("max_tokens") is None:
        raise BadRequest("max_tokens: Field required")
    return pairs


def _usage(req: SimRequest, output: int) -> dict[str, Any]:
    return {"input_tokens": req.prompt_tokens - req.cached_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": req.cached_tokens,
            "output_tokens": output}


def _stop_reason(req: SimRequest) -> str:
    return "max_tokens" if req.finish_reason == "length" else "end_turn"


async def messages(request: web.Request) -> web.StreamResponse:
    cluster = request.app[CLUSTER]
    try:
        body = await read_body(request, cluster)
        tokens = cluster.hasher.chat_tokens(_messages_pairs(body))
        req = make(cluster, request, body, tokens, "max_tokens")
    except BadRequest as e:
        return anthropic_error(str(e), e.status,
                                "not_found_error" if e.status == 404 else
                                "invalid_request_error")
    mid = f"msg_sim{req.rid}"
    head = {"id": mid, "type": "message", "role": "assistant", "model": cluster.cfg.model}

    def whole(r: SimRequest) -> web.Response:
        text = "".join(word(r, i) for i in range(r.generated))
        return web.json_response({**head, "content": [{"type": "text", "text": text}],
                                  "stop_reason": _stop_reason(r), "stop_sequence": None,
                                  "usage": _usage(r, r.generated)})

    async def stream(resp: web.StreamResponse, r: SimRequest, progress: asyncio.Event
                     ) -> None:
        started = False
        async for new in token_ranges(r, progress):
            parts = []
            if not started:  # the prompt's cached tokens are known once it is scheduled
                started = True
                parts.append(_sse("message_start", {"type": "message_start", "message": {
                    **head, "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": _usage(r, 1)}}))
                parts.append(_sse("content_block_start", {
                    "type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}))
            parts.extend(_sse("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": word(r, i)}}) for i in new)
            await resp.write("".join(parts).encode())
        if r.aborted:
            await resp.write(_sse("error", {"type": "error", "error": {
                "type": "api_error", "message": ABORTED}}).encode())
            return
        await resp.write((_sse("content_block_stop", {"type": "content_block_stop",
                                                      "index": 0})
                          + _sse("message_delta", {
                              "type": "message_delta",
                              "delta": {"stop_reason": _stop_reason(r), "stop_sequence": None},
                              "usage": _usage(r, r.generated)})
                          + _sse("message_stop", {"type": "message_stop"})).encode())

    return await serve(request, cluster, req, whole,
                       stream if body.get("stream") else None,
                       lambda m: anthropic_error(m, 500 if m == ABORTED else 400,
                                                  "api_error" if m == ABORTED
                                                  else "invalid_request_error"))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/messages", messages)
