"""What a relayed response said (usage, model, text, tool calls), read with bounded memory.

A response is kept whole up to ``SPILL_BYTES`` and read after it was relayed, off the
call's path (:class:`ResponseTap`); past that it is read as it arrives, so a response of
any length (an endless stream) holds at most: ``TEXT_CAP`` characters of text and
tool-call arguments, one SSE line of ``LINE_CAP`` bytes, a non-streamed body of
``BODY_CAP`` bytes, ``MAX_TOOL_CALLS`` tool calls. The text beyond ``TEXT_CAP`` still goes
into its hash (``replybody.part_hash``, for the reply digest) and its length (for
counting). The record it makes (:class:`Reply`), and the reading of a non-streamed (JSON)
body, are in :mod:`agentbench.proxy.replybody`.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from typing import Any

from agentbench.proxy.replybody import Reply, chat_usage, whole_reply
from agentbench.transport.sselines import BOM

#: characters of response text and tool-call arguments kept per call
TEXT_CAP = 1 << 22
#: bytes of one SSE line; a longer line is dropped
LINE_CAP = 1 << 23
#: bytes of a non-streamed (JSON) body, decompressed; a longer body is not read
BODY_CAP = 1 << 26
#: a response up to this many bytes is kept whole and read after the relay
SPILL_BYTES = 1 << 22
MAX_TOOL_CALLS = 1024
_ID_CAP = 4096
_PIECE = 1 << 20  # decompressed bytes per step: a small gzip bomb stays small


class ReplyReader:
    """Reads a response fed piece by piece: ``feed(bytes)``, then ``finish()``.
    ``stream``: SSE (True), one JSON body (False), or None to tell from the first byte."""

    def __init__(self, encoding: str | None, stream: bool | None) -> None:
        self.stream = stream
        self.unreadable = encoding not in (None, "", "identity", "gzip", "deflate")
        self._inflate = zlib.decompressobj(47) if encoding in ("gzip", "deflate") else None
        self._line = bytearray()
        self._skip = False  # inside a line longer than LINE_CAP
        self._lead: bytes | None = b""  # the body's first bytes, while they may be a mark's
        self._body = bytearray()
        self._texts: list[str] = []
        self._hash = hashlib.blake2b(digest_size=16)
        self._calls: dict[int, dict[str, Any]] = {}
        self._extra: list[str] = []
        self._typed_usage: dict[str, Any] = {}
        self._api = ""  # "responses" or "messages" once a typed event was read
        self.reply = Reply()

    def feed(self, data: bytes) -> None:
        if self.unreadable or not data:
            return
        if self._inflate is None:
            self._take(data)
            return
        try:
            while data:
                self._take(self._inflate.decompress(data, _PIECE))
                data = self._inflate.unconsumed_tail
        except zlib.error:
            self.unreadable = True

    def _take(self, data: bytes) -> None:
        # a byte order mark is dropped, as SSE readers (and JSON's) may, however the reads
        # cut it (a gzip body's first read may inflate to nothing)
        if self._lead is not None:
            data = self._lead + data
            if len(data) < len(BOM) and BOM.startswith(data):
                self._lead = data
                return
            self._lead = None
            if data.startswith(BOM):
                data = data[len(BOM):]
        if self.stream is None:
            head = data.lstrip()
            if not head:
                return
            self.stream = head[:1] not in (b"{", b"[")
        if not self.stream:
            if len(self._body) + len(data) <= BODY_CAP:
                self._body += data
            else:
                self.unreadable = True
            return
        if b"\r" in data:  # lines may end CRLF or CR (SSE allows both): read them as LF
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            if self._skip:
                self._skip = False
            elif self._line:
                self._line += data[start:nl]
                self._event(bytes(self._line))
                self._line.clear()
            else:
                self._event(data[start:nl])
            start = nl + 1
        if not self._skip and start < len(data):
            if len(self._line) + len(data) - start > LINE_CAP:
                self._line.clear()
                self._skip = True
            else:
                self._line += data[start:]

    def _text(self, s: str) -> None:
        self._hash.update(s.encode("utf-8", "surrogatepass"))
        self.reply.text_chars += len(s)
        self._texts.append(self._keep(s))

    def _keep(self, s: str) -> str:
        r = self.reply
        r.all_chars += len(s)
        s = s[:max(0, TEXT_CAP - r.kept_chars)]
        r.kept_chars += len(s)
        return s

    def _event(self, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):  # nested past the reader: read as no event
            return  # (raised mid-relay past SPILL_BYTES, it broke the client's answer)
        if not isinstance(doc, dict):
            return
        out = self.reply
        if doc.get("object") == "error" and "choices" not in doc:
            # vLLM's ErrorResponse as the event's data (its "type" is the error's class,
            # not an event type): the stream failed, as with {"error": ...}
            if out.stream_error is None:
                out.stream_error = _said(doc)
            return
        kind = doc.get("type")
        if isinstance(kind, str) and "choices" not in doc:
            self._typed(kind, doc)
            return
        if "error" in doc and "choices" not in doc and out.stream_error is None:
            out.stream_error = _said(doc["error"])
            return
        if isinstance(doc.get("usage"), dict):
            out.usage = doc["usage"]
        if out.model is None and isinstance(doc.get("model"), str):
            out.model = doc["model"]
        for ch in doc.get("choices") or ():
            if not isinstance(ch, dict):
                continue
            d: dict[str, Any] = ch["delta"] if isinstance(ch.get("delta"), dict) else ch
            for k in ("content", "reasoning_content", "reasoning", "text"):
                if isinstance(d.get(k), str):
                    self._text(d[k])
            for tc in d.get("tool_calls") or ():
                if isinstance(tc, dict):
                    self._tool_call(tc)

    def _typed(self, kind: str, doc: dict[str, Any]) -> None:
        """One Responses or Messages event (``agentbench.transport.typed_sse``)."""
        out = self.reply
        if kind in ("error", "response.failed"):
            if out.stream_error is None:
                r = doc.get("response")
                out.stream_error = _said(doc.get("error") or (r.get("error") if isinstance(
                    r, dict) else None) or doc)
            return
        if kind.startswith("response."):
            self._api = "responses"
            r = doc.get("response")
            if isinstance(r, dict):
                if out.model is None and isinstance(r.get("model"), str):
                    out.model = r["model"]
                if isinstance(r.get("usage"), dict):
                    self._typed_usage.update(r["usage"])
            delta = doc.get("delta")
            item = doc.get("item")
            if kind == "response.output_text.delta" and isinstance(delta, str):
                self._text(delta)
            elif kind in ("response.reasoning_text.delta", "response.refusal.delta",
                          "response.reasoning_summary_text.delta") and isinstance(delta, str):
                self._extra.append(self._keep(delta))
            elif kind in ("response.function_call_arguments.delta",
                          "response.custom_tool_call_input.delta") and isinstance(delta, str):
                self._args(doc.get("output_index"), delta)
            elif kind == "response.output_item.added" and isinstance(item, dict) \
                    and item.get("type") in ("function_call", "custom_tool_call"):
                self._slot(doc.get("output_index"), str(item.get("call_id") or ""),
                           str(item.get("name") or ""))
            return
        self._api = "messages"
        if kind == "message_start" and isinstance(doc.get("message"), dict):
            m = doc["message"]
            if out.model is None and isinstance(m.get("model"), str):
                out.model = m["model"]
            if isinstance(m.get("usage"), dict):  # output_tokens there is a placeholder
                self._typed_usage.update({k: v for k, v in m["usage"].items()
                                          if k != "output_tokens"})
        elif kind == "message_delta" and isinstance(doc.get("usage"), dict):
            self._typed_usage.update({k: v for k, v in doc["usage"].items()
                                      if v is not None})
        elif kind == "content_block_start" and isinstance(doc.get("content_block"), dict):
            b = doc["content_block"]
            if b.get("type") == "tool_use":
                self._slot(doc.get("index"), str(b.get("id") or ""), str(b.get("name") or ""))
        elif kind == "content_block_delta" and isinstance(doc.get("delta"), dict):
            d = doc["delta"]
            if d.get("type") == "text_delta" and isinstance(d.get("text"), str):
                self._text(d["text"])
            elif d.get("type") == "thinking_delta" and isinstance(d.get("thinking"), str):
                self._extra.append(self._keep(d["thinking"]))
            elif d.get("type") == "input_json_delta" and isinstance(d.get("partial_json"),
                                                                     str):
                self._args(doc.get("index"), d["partial_json"])

    def _slot(self, index: Any, call_id: str, name: str) -> None:
        """A typed stream's tool call, opened at its output (or content block) index."""
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        if index not in self._calls and len(self._calls) < MAX_TOOL_CALLS:
            self._calls[index] = {"id": call_id[:_ID_CAP], "args": [self._keep(name)]}

    def _args(self, index: Any, piece: str) -> None:
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        slot = self._calls.get(index)
        if slot is not None:
            slot["args"].append(self._keep(piece))

    def _tool_call(self, tc: dict[str, Any]) -> None:
        index = tc.get("index", 0)
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        slot = self._calls.get(index)
        if slot is None:
            if len(self._calls) >= MAX_TOOL_CALLS:
                return
            slot = self._calls[index] = {"id": "", "args": []}
        slot["id"] = slot["id"] or str(tc.get("id") or "")[:_ID_CAP]
        fn = tc.get("function")
        if isinstance(fn, dict):
            slot["args"].append(self._keep(str(fn.get("name") or "")
                                           + str(fn.get("arguments") or "")))

    def finish(self) -> Reply:
        """The reply (an unreadable body gives an empty one: counts fall back to the
        tokenizer)."""
        if self._lead:  # the body ended inside what could have been a mark: it was not
            lead, self._lead = self._lead, None
            self._take(lead)
        if self.unreadable:
            return Reply(streamed=self.stream)
        if not self.stream:
            out = whole_reply(bytes(self._body))
            out.streamed = self.stream
            return out
        if self._line and not self._skip:
            self._event(bytes(self._line))
        out = self.reply
        out.streamed = True
        out.text = "".join(self._texts)
        out.extra = "".join(self._extra)
        out.text_hash = self._hash.digest()
        if self._api:
            out.usage = chat_usage(self._api, self._typed_usage)
        out.tool_calls = [{"id": c["id"], "args": "".join(c["args"])}
                          for _, c in sorted(self._calls.items())]
        return out


def _said(err: object) -> str:
    """An error event's message, one short line (the record keeps no more)."""
    if isinstance(err, dict):
        msg = err.get("message")
        kind = err.get("type") if err.get("type") != "error" else err.get("code")
        text = f"{kind}: {msg}" if isinstance(msg, str) and kind else str(msg or err)
    else:
        text = str(err)
    return " ".join(text.split())[:200]


def parse_response(body: bytes, encoding: str | None, stream: bool | None) -> Reply:
    """The reply of a whole response body (SSE or one JSON body)."""
    reader = ReplyReader(encoding, stream)
    reader.feed(body)
    return reader.finish()


class ResponseTap:
    """The bytes of one relayed response, for the analysis after the relay: kept whole
    up to ``SPILL_BYTES``, read as they come past that (memory stays bounded)."""

    __slots__ = ("encoding", "chunks", "size", "reader")

    def __init__(self, encoding: str | None) -> None:
        self.encoding = encoding
        self.chunks: list[bytes] = []
        self.size = 0
        self.reader: ReplyReader | None = None

    def add(self, chunk: bytes) -> None:
        if self.reader is not None:
            self.reader.feed(chunk)
            return
        self.chunks.append(chunk)
        self.size += len(chunk)
        if self.size > SPILL_BYTES:
            self.reader = ReplyReader(self.encoding, None)
            for c in self.chunks:
                self.reader.feed(c)
            self.chunks = []

    def reply(self, stream: bool | None) -> Reply:
        """The reply; ``stream`` (the request's flag; None: tell from the first byte) says
        how to read a response that was kept whole."""
        reader = self.reader
        if reader is None:
            reader = ReplyReader(self.encoding, stream)
            for c in self.chunks:
                reader.feed(c)
            self.chunks = []
        return reader.finish()
