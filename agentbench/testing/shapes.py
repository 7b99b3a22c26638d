"""The wire shapes of the fake server's answers, one per API (chat, completions, responses,
messages): the events a stream opens with, one token event, the events that close it (with
usage, or without the final one for the ``no_done`` fault), a mid-stream error (and, for
chat and completions, one as vLLM writes it), a token
whose text holds the bytes of the stream's last event, and a non-streamed body. Usage is
given as counts (prompt, cached, output) or None."""

from __future__ import annotations

import json
from typing import Any

Counts = tuple[int, int, int] | None
#: JSON nested deeper than any JSON reader recurses (``deep_json``)
DEEP = b"[" * 100_000 + b"]" * 100_000


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class Shape:
    """chat and completions (OpenAI's chunk objects, ``data: [DONE]`` at the end)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.chat = api == "chat"
        self.base = ('{"id":"x","object":"chat.completion.chunk","created":0,"model":"fake",'
                     if self.chat else
                     '{"id":"x","object":"text_completion","created":0,"model":"fake",')

    @staticmethod
    def usage_json(counts: Counts) -> str:
        if counts is None:
            return '"usage":null'
        prompt, cached, out = counts
        return (f'"usage":{{"prompt_tokens":{prompt},"completion_tokens":{out},'
                f'"total_tokens":{prompt + out},'
                f'"prompt_tokens_details":{{"cached_tokens":{cached}}}}}')

    def opening(self, counts: Counts) -> bytes:
        """The events before the first token."""
        if not self.chat:
            return b""
        return ("data: " + self.base + '"choices":[{"index":0,"delta":{"role":"assistant",'
                '"content":""},"finish_reason":null}]}\n\n').encode()

    def line_start(self) -> bytes:
        """The start of a token event whose text never ends (``endless_line``)."""
        return b'data: {"id":"x","choices":[{"delta":{"content":"'

    def token(self, words: str, last: bool, counts: Counts) -> bytes:
        fin = '"length"' if last else "null"
        if self.chat:
            ev = (self.base + '"choices":[{"index":0,"delta":{"content":' + json.dumps(words)
                  + '},"finish_reason":' + fin + "}]}")
        else:
            ev = (self.base + '"choices":[{"index":0,"text":' + json.dumps(words)
                  + ',"finish_reason":' + fin + "}]"
                  + ("," + self.usage_json(counts) if last else "") + "}")
        return ("data: " + ev + "\n\n").encode()

    def closing(self, counts: Counts, done: bool) -> bytes:
        out = ("data: " + self.base + '"choices":[],' + self.usage_json(counts)
               + "}\n\n").encode() if self.chat else b""
        return out + (self.end(counts) if done else b"")

    def end(self, counts: Counts) -> bytes:
        """The event that ends a stream well."""
        return b"data: [DONE]\n\n"

    def end_in_text(self) -> bytes:
        """A token event whose text holds the bytes of the stream's last event
        (``agentbench.transport.apis.END_MARKS``), which ends nothing (``end_in_text``)."""
        return self.token(" data: [DONE]" if self.chat else "[DONE]", False, None)

    def deep(self) -> bytes:
        """An event nested past any JSON reader's depth, after the closing events but the
        last (where a chat stream's usage is read)."""
        return b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1},"x":' \
            + DEEP + b"}\n\n"

    def error(self, message: str = "engine died") -> bytes:
        return b"data: " + json.dumps({"error": {"message": message}}).encode() + b"\n\n"

    def vllm_error(self, message: str = "engine died") -> bytes:
        """A mid-stream error as vLLM writes it: its ErrorResponse as the event's data, not in
        an ``error`` object (``vllm_error_event``)."""
        err = {"object": "error", "message": message, "type": "BadRequestError",
               "param": None, "code": 400}
        return b"data: " + json.dumps(err, separators=(",", ":")).encode() + b"\n\n"

    def malformed(self) -> bytes:
        return b"data: {not json at all\n\n"

    def whole(self, text: str, counts: Counts) -> dict[str, Any]:
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant",
                                                           "content": text}}
                                  if self.chat else {"index": 0, "text": text})
        usage = json.loads("{" + self.usage_json(counts) + "}")["usage"]
        return {"id": "x", "object": "chat.completion" if self.chat else "text_completion",
                "model": "fake", "choices": [{**choice, "finish_reason": "length"}],
                "usage": usage}


class ResponsesShape(Shape):
    """OpenAI Responses events."""

    def __init__(self, api: str = "responses") -> None:
        super().__init__(api)
        self.seq = 0

    def _ev(self, kind: str, **data: Any) -> bytes:
        self.seq += 1
        return _sse(kind, {"type": kind, "sequence_number": self.seq, **data})

    @staticmethod
    def usage_obj(counts: Counts) -> dict[str, Any] | None:
        if counts is None:
            return None
        prompt, cached, out = counts
        return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + out}

    def _response(self, status: str, counts: Counts) -> dict[str, Any]:
        return {"id": "resp_x", "object": "response", "model": "fake", "status": status,
                "output": [], "usage": self.usage_obj(counts)}

    def opening(self, counts: Counts) -> bytes:
        r = self._response("in_progress", None)
        return (self._ev("response.created", response=r)
                + self._ev("response.in_progress", response=r)
                + self._ev("response.output_item.added", output_index=0, item={
                    "id": "msg_x", "type": "message", "role": "assistant", "content": []}))

    def line_start(self) -> bytes:
        return b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta"' \
               b',"delta":"'

    def token(self, words: str, last: bool, counts: Counts) -> bytes:
        return self._ev("response.output_text.delta", item_id="msg_x", output_index=0,
                        content_index=0, delta=words)

    def closing(self, counts: Counts, done: bool) -> bytes:
        out = self._ev("response.output_item.done", output_index=0,
                       item={"id": "msg_x", "type": "message", "role": "assistant"})
        return out + (self.end(counts) if done else b"")

    def end(self, counts: Counts) -> bytes:
        return self._ev("response.completed", response=self._response("incomplete", counts))

    def end_in_text(self) -> bytes:
        return self.token("response.completed", False, None)

    def deep(self) -> bytes:
        return b'event: response.in_progress\ndata: {"type":"response.in_progress","x":' \
            + DEEP + b"}\n\n"

    def error(self, message: str = "engine died") -> bytes:
        return self._ev("error", code="server_error", message=message, param=None)

    def malformed(self) -> bytes:
        return b"event: response.output_text.delta\ndata: {not json at all\n\n"

    def whole(self, text: str, counts: Counts) -> dict[str, Any]:
        r = self._response("incomplete", counts)
        r["output"] = [{"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}]
        return r


class MessagesShape(Shape):
    """Anthropic Messages events (``input_tokens`` without the cache reads)."""

    @staticmethod
    def usage_obj(counts: Counts, output: int | None = None) -> dict[str, Any] | None:
        if counts is None:
            return None
        prompt, cached, out = counts
        return {"input_tokens": prompt - cached, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
                "output_tokens": out if output is None else output}

    def opening(self, counts: Counts) -> bytes:
        usage = self.usage_obj(counts, 1) or {"output_tokens": 1}
        return (_sse("message_start", {"type": "message_start", "message": {
            "id": "msg_x", "type": "message", "role": "assistant", "model": "fake",
            "content": [], "usage": usage}})
            + _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}))

    def line_start(self) -> bytes:
        return b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,' \
               b'"delta":{"type":"text_delta","text":"'

    def token(self, words: str, last: bool, counts: Counts) -> bytes:
        return _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": words}})

    def closing(self, counts: Counts, done: bool) -> bytes:
        usage = {"output_tokens": counts[2]} if counts is not None else None
        out = (_sse("content_block_stop", {"type": "content_block_stop", "index": 0})
               + _sse("message_delta", {"type": "message_delta",
                                        "delta": {"stop_reason": "max_tokens"},
                                        "usage": usage}))
        return out + (self.end(counts) if done else b"")

    def end(self, counts: Counts) -> bytes:
        return _sse("message_stop", {"type": "message_stop"})

    def end_in_text(self) -> bytes:
        return self.token("message_stop", False, None)

    def deep(self) -> bytes:
        return b'event: ping\ndata: {"type":"ping","x":' + DEEP + b"}\n\n"

    def error(self, message: str = "engine died") -> bytes:
        return _sse("error", {"type": "error", "error": {"type": "overloaded_error",
                                                         "message": message}})

    def malformed(self) -> bytes:
        return b"event: content_block_delta\ndata: {not json at all\n\n"

    def whole(self, text: str, counts: Counts) -> dict[str, Any]:
        return {"id": "msg_x", "type": "message", "role": "assistant", "model": "fake",
                "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens",
                "usage": self.usage_obj(counts)}


def shape(path: str) -> Shape:
    """The shape of the API served at ``path``."""
    if path.endswith("/responses"):
        return ResponsesShape()
    if path.endswith("/messages"):
        return MessagesShape("messages")
    return Shape("chat" if path.endswith("/chat/completions") else "completions")
