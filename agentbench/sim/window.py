"""The model's context window (docs/simulator.md, "Fitting a preset"): which requests a
simulated endpoint refuses as too long, and where an engine cuts an output short."""

from __future__ import annotations

from agentbench.sim.request import SimRequest


def context_error(req: SimRequest, max_context_tokens: int | None,
                  counts_output: bool = True) -> str | None:
    """The refusal of a request too long for the model's context window, or None when it
    fits (or there is no window). ``counts_output``: the OpenAI API's and older vLLM's rule,
    prompt plus output (``max_tokens`` when the client forces the length, else the
    simulated length, at most ``max_tokens``) within the window; otherwise the engines'
    (vLLM 0.32, llama.cpp): a prompt that leaves no room for one output token is refused,
    and a longer output is cut at the window (``fit_output``)."""
    if max_context_tokens is None:
        return None
    if not counts_output:
        if req.prompt_tokens < max_context_tokens:
            return None
        return (f"This model's maximum context length is {max_context_tokens} tokens. "
                f"However, your prompt contains {req.prompt_tokens} input tokens, which "
                "leaves no room for output. Please reduce the length of the input prompt.")
    total = req.prompt_tokens + req.output_tokens
    if total <= max_context_tokens:
        return None
    return (f"This model's maximum context length is {max_context_tokens} tokens. However, "
            f"you requested {total} tokens ({req.prompt_tokens} in the messages, "
            f"{req.output_tokens} in the completion). Please reduce the length of the "
            "messages or completion.")


def fit_output(req: SimRequest, max_context_tokens: int) -> None:
    """An engine's cut of an output that would pass the window (vLLM 0.32 lowers
    ``max_tokens`` to the room left, ``get_max_tokens``; llama.cpp stops generating when
    the slot is full): the request ends there, as a ``length`` finish."""
    room = max(1, max_context_tokens - req.prompt_tokens)
    if req.output_tokens > room:
        req.output_tokens, req.finish_as = room, "length"
