"""Short files a user names (a scenario, a synth profile, gate's Markdown) opened so that a
FIFO never blocks: opened without waiting for its other end, then read or written as any
file. A FIFO that nothing writes reads as empty; one that nothing reads cannot be written
(``ENXIO``): each is one line where it is used, where it hung forever. A pipe with its
other end open (``validate <(cat x.yaml)``, ``--markdown /dev/stdout``) works as before."""

from __future__ import annotations

import os
from pathlib import Path

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def read_head(path: str | Path, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path`` (``OSError`` as ``open`` raises it)."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK)
    if _NONBLOCK:
        os.set_blocking(fd, True)  # wait for a writer's bytes once it is there
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)


def write_text(path: str | Path, text: str) -> None:
    """``text`` into ``path``, made or truncated (``OSError`` as ``open`` raises it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NONBLOCK, 0o666)
    if _NONBLOCK:
        os.set_blocking(fd, True)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
