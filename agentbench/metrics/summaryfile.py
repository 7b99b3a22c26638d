"""summary.json on disk: derived from a run's tables, so it is written with a digest of
its own text and read back only while intact (docs/architecture.md#results-on-disk). A
file edited by hand, cut short, not JSON or not an object is no summary to trust, and the
reader computes it again from the tables instead."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
from pathlib import Path
from typing import Any

#: the key holding the SHA-256 of the rest of the object, as ``_text`` writes it
DIGEST_KEY = "digest"
#: this process's writes, naming each one's temporary file
_WRITES = itertools.count()


def _text(summary: dict[str, Any]) -> str:
    return json.dumps(summary, allow_nan=False, separators=(",", ":"))


def _digest(summary: dict[str, Any]) -> str:
    return hashlib.sha256(_text(summary).encode()).hexdigest()


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    """Write ``summary`` and its digest to ``path`` (through a temporary file of this
    writer's own: two processes summarizing one run at once, a notebook's ``load`` and
    ``agentbench report``, each replace the file whole; with one temporary name for both,
    the second's replace found it gone)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{next(_WRITES)}.tmp")
    try:
        tmp.write_text(_text({**summary, DIGEST_KEY: _digest(summary)}))
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):  # a read-only folder: there is none
            tmp.unlink(missing_ok=True)
        raise


def read_summary(path: Path) -> dict[str, Any] | None:
    """The summary at ``path``, or None when it is not one ``write_summary`` wrote intact
    (the caller computes it again). JSON reads its numbers and strings back as they were
    written, and keeps the keys' order, so the digest is that of the text written."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    digest = data.pop(DIGEST_KEY, None)
    try:
        return data if digest == _digest(data) else None
    except (TypeError, ValueError):  # NaN or infinities, which the writer never writes
        return None
