"""Traces: the model, readers for the formats people have, synthesis and analysis."""

from typing import Any

from agentbench.traces.model import Session, Trace, Turn, as_hash_ids

__all__ = ["Session", "Trace", "Turn", "as_hash_ids", "read_trace"]


def read_trace(source: str, format: str | None = None, *, skip_bad: bool = False,
               **options: Any) -> Trace:
    """Read any supported trace source into the one model (format detected when None);
    ``skip_bad``: leave a folder's bad files out (listed in ``Trace.skipped``)."""
    from agentbench.traces.readers import read_trace as _read

    return _read(source, format=format, skip_bad=skip_bad, **options)
