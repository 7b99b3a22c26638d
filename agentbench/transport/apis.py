"""The four APIs a replay speaks, in one place (docs/architecture.md#apis): the path each is
served at, the small requests an open sends (preflight, ``ignore_eos`` probe, prompt-count
calibration), where each reports usage, the headers it needs, and how its stream is read.

- ``chat``: ``POST /v1/chat/completions``, one user message of text blocks;
- ``completions``: ``POST /v1/completions``, the prompt as token ids;
- ``responses``: ``POST /v1/responses`` (what Codex speaks), one ``input`` message of text
  blocks, ``max_output_tokens``, ``store: false``;
- ``messages``: ``POST /v1/messages`` (Anthropic's, what Claude Code speaks), one user
  message of text blocks, ``max_tokens``; the key goes in ``x-api-key`` and
  ``anthropic-version`` is sent.

The request bodies themselves are pre-encoded by ``agentbench.prompts.layout.body_template``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentbench.transport.sse import StreamResult, parse_stream, read_count
from agentbench.transport.typed_sse import parse_typed, usage_counts

APIS = ("chat", "completions", "responses", "messages")
#: the APIs whose prompt is text in one user message (the chat template's layout)
MESSAGE_APIS = frozenset({"chat", "responses", "messages"})
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions",
         "responses": "/v1/responses", "messages": "/v1/messages"}
#: the body field that caps the output, per API
MAX_TOKENS_FIELD = {"chat": "max_tokens", "completions": "max_tokens",
                    "responses": "max_output_tokens", "messages": "max_tokens"}
#: the smallest max_output_tokens OpenAI's Responses API takes (the start-up probes ask
#: for it; a replayed turn asks for what the trace says)
MIN_RESPONSES_OUTPUT = 16
#: the version header a Messages request carries unless the scenario's headers set one
ANTHROPIC_VERSION = "2023-06-01"
#: the bytes of the event that ends a stream of each API, looked for in the reads of a
#: stream by ``agentbench.transport.streamtimer`` (what they are is then confirmed by reading
#: the stream: docs/reliability.md); Responses' ``response.failed`` ends it as an error
END_MARKS = {"chat": (b"[DONE]",), "completions": (b"[DONE]",),
             "responses": (b"response.completed", b"response.incomplete", b"response.failed"),
             "messages": (b"message_stop",)}


def path(api: str) -> str:
    return PATHS[api]


def prompt_kind(api: str) -> str:
    """The kind of prompt blocks: ``chat`` (text) or ``completions`` (token ids)."""
    return "chat" if api in MESSAGE_APIS else "completions"


def read_stream(api: str, chunks: Sequence[bytes], times: Sequence[int]) -> StreamResult:
    """What a finished stream of ``api`` said."""
    if api in ("responses", "messages"):
        return parse_typed(chunks, times, api)
    return parse_stream(chunks, times)


def small_body(api: str, model: str, extra: dict[str, Any], text: str | list[int],
               max_tokens: int, **fields: Any) -> dict[str, Any]:
    """A one-message request of ``api`` (not streamed unless ``fields`` says so)."""
    body: dict[str, Any] = {"model": model}
    if api == "completions":
        body["prompt"] = text
    elif api == "responses":
        body["input"] = [{"role": "user", "content": text}]
        body["store"] = False
    else:
        body["messages"] = [{"role": "user", "content": text}]
    # OpenAI's Responses API refuses max_output_tokens under 16 ("Expected a value >= 16")
    body[MAX_TOKENS_FIELD[api]] = max(max_tokens, MIN_RESPONSES_OUTPUT) \
        if api == "responses" else max_tokens
    body.setdefault("stream", False)
    body.update(fields)
    body.update(extra)
    return body


def prompt_tokens(api: str, answer: Any) -> int | None:
    """The prompt tokens a non-streamed answer of ``api`` reports, or None."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return None
    if api in ("responses", "messages"):
        return usage_counts(api, usage)[0]
    return read_count(usage.get("prompt_tokens"))


def usage_name(api: str) -> str:
    """Where ``api`` reports prompt tokens (for messages naming it)."""
    return {"responses": "usage.input_tokens",
            "messages": "usage.input_tokens (+ cache_read/cache_creation_input_tokens)"
            }.get(api, "usage.prompt_tokens")


def auth_headers(api: str, key: str, headers: dict[str, str]) -> None:
    """Put the API key where ``api`` expects it: ``x-api-key`` for messages, else
    ``Authorization: Bearer``."""
    if api == "messages":
        headers["x-api-key"] = key
    else:
        headers["Authorization"] = f"Bearer {key}"


def api_headers(api: str, headers: dict[str, str]) -> None:
    """Headers ``api`` needs on every request (unless the scenario set them)."""
    if api == "messages" and "anthropic-version" not in {k.lower() for k in headers}:
        headers["anthropic-version"] = ANTHROPIC_VERSION
