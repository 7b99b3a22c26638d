"""Traces: the model, readers for the formats people have, synthesis and analysis.

The model's names load on first use, so the scenario can read this package's bounds
without importing numpy (``agentbench --help`` stays instant)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbench.traces.model import Session, Trace, Turn, as_hash_ids

__all__ = ["MAX_BLOCK_SIZE", "MAX_SYNTH_SESSIONS", "MAX_TOKENS", "MIN_SCALE",
           "NOT_READER_OPTIONS", "Session", "Trace", "Turn", "as_hash_ids", "read_trace"]

#: the most root sessions a synthetic trace may have (``synthesize``, ``trace.sessions``,
#: ``synth:PROFILE:N``, ``traces synth -n``): a guard against a typo that would run for
#: hours or exhaust memory, not a measured limit
MAX_SYNTH_SESSIONS = 10_000_000
#: the largest KV block size, in tokens: a simulated endpoint's ``block_size`` and a trace
#: reader's ``block_size`` option (2**70 made every prompt one block); a guard against a
#: typo, not a measured limit
MAX_BLOCK_SIZE = 1 << 20
#: The most tokens one request may count (input or output): ten times the longest context
#: served today (1M tokens), so a garbled count (``1e15``) is an error naming its field
#: before anything is sized by it, not a MemoryError later. A list of hash ids is bounded
#: by it too, as ``ceil(MAX_TOKENS / block_size)`` ids at most. So is a prompt cap
#: (``traces stats --max-context``) and a grid's context (``sim fit --max-context``).
MAX_TOKENS = 10_000_000
#: ``read_trace``'s own arguments, which a reader option may not name (the call failed
#: with a TypeError traceback), and the scenario key each is set by instead
NOT_READER_OPTIONS = {"source": "trace.source", "format": "trace.format",
                      "sessions": "trace.filters.sessions"}
#: the smallest factor a trace's token counts are scaled by (``trace.transform.scale``,
#: ``traces stats --scale``): below it prompts shrink to nothing (1e-300: one token each)
MIN_SCALE = 0.001


def __getattr__(name: str) -> Any:
    if name in ("Session", "Trace", "Turn", "as_hash_ids"):
        from agentbench.traces import model

        return getattr(model, name)
    raise AttributeError(f"module 'agentbench.traces' has no attribute {name!r}")


def read_trace(source: str, format: str | None = None, *, skip_bad: bool = False,
               **options: Any) -> "Trace":
    """Read any supported trace source into the one model (format detected when None);
    ``skip_bad``: leave a folder's bad files out (listed in ``Trace.skipped``)."""
    from agentbench.traces.readers import read_trace as _read

    return _read(source, format=format, skip_bad=skip_bad, **options)
