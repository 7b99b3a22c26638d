"""Context overflow: a failed request whose error body says the prompt did not fit the
model's context window. Classified in the replay from the row's status and message (the
transport only records what the server said); the session ends at its first overflow,
since every later turn carries a longer prompt still."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentbench.results import schema as records

#: the error type of a context overflow
CONTEXT_OVERFLOW = records.CONTEXT_OVERFLOW

#: what engines say when a prompt exceeds the context (case-insensitive substrings)
DEFAULT_PHRASES: tuple[str, ...] = (
    "maximum context length",  # vLLM, OpenAI: "This model's maximum context length is N"
    "context_length_exceeded",  # OpenAI error code
    "longer than the maximum model length",  # vLLM: "The decoder prompt (length N) is ..."
    "longer than the model's context length",  # SGLang: "The input (N tokens) is ..."
    "exceeds the available context size",  # llama.cpp server (exceed_context_size_error)
    "the request exceeds",  # llama.cpp: "the request exceeds the available context size"
    "exceed_context_size",  # llama.cpp error type
    "max_seq_len",  # TensorRT-LLM: prompt + max_tokens above max_seq_len
    "exceeds the maximum sequence length",  # TensorRT-LLM
    "prompt is too long",  # Anthropic-style: "prompt is too long: N tokens > M maximum"
    "input is too long",
)


def is_overflow(status: str | None, message: str | None, phrases: Sequence[str]) -> bool:
    """Whether a row with ``status`` and error ``message`` is a context overflow."""
    if status in (records.OK, records.CANCELLED) or not message:
        return False
    low = message.lower()
    return any(p and p.lower() in low for p in phrases)


def classifier(phrases: Sequence[str] | None) -> Callable[[dict[str, Any]], None] | None:
    """A function that marks a request row ``context_overflow`` when its error matches
    ``phrases`` (None: :data:`DEFAULT_PHRASES`; empty: no detection, returns None)."""
    use = tuple(DEFAULT_PHRASES if phrases is None else phrases)
    if not use:
        return None

    def amend(row: dict[str, Any]) -> None:
        if is_overflow(row.get("status"), row.get("error_message"), use):
            row["error_type"] = CONTEXT_OVERFLOW

    return amend
