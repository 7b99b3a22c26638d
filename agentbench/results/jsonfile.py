"""Reading the JSON files of a run folder (run.json) that a person or another tool may have
edited or damaged: a value nested past Python's recursion limit is a ``ValueError`` like
any other text that is not JSON, and NaN or infinities (which JSON has not; Python's
reader takes them) read as null, as a figure with no value. Callers already turn a
``ValueError`` into one line naming the file."""

from __future__ import annotations

import json
from typing import Any


def _no_value(_: str) -> None:
    return None


def loads(text: str) -> Any:
    """``json.loads`` for a run folder's files (see the module doc)."""
    try:
        return json.loads(text, parse_constant=_no_value)
    except RecursionError:
        raise ValueError("nested too deeply") from None
