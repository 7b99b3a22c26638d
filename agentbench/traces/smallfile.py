"""Short files a user names (a scenario, a synth profile, gate's Markdown) opened so that a
FIFO never blocks forever: its other end is waited for at most ``PEER_WAIT_S`` (a program
that opens it a moment later still works), then it cannot be read (``TimeoutError``) or
written (``ENXIO``): each is one line where it is used, where it hung forever. A pipe with its
other end open (``validate <(cat x.yaml)``, ``--markdown /dev/stdout``) and a regular file
work as before."""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: how long a FIFO's other end is waited for
PEER_WAIT_S = 10.0
_POLL_S = 0.05


def read_head(path: str | Path, limit: int, wait_s: float | None = None) -> bytes:
    """At most ``limit`` bytes of ``path`` (``OSError`` as ``open`` raises it). A FIFO
    that no writer opens within ``wait_s`` (default ``PEER_WAIT_S``) is a
    ``TimeoutError`` that says so."""
    wait_s = PEER_WAIT_S if wait_s is None else wait_s
    fd = os.open(path, os.O_RDONLY | _NONBLOCK)
    with os.fdopen(fd, "rb", buffering=0) as raw:
        first = b""
        if _NONBLOCK and stat.S_ISFIFO(os.fstat(fd).st_mode):
            got = _first_bytes(fd, wait_s)
            if got is None:
                raise TimeoutError(errno.ETIMEDOUT, f"a FIFO that nothing opened to write "
                                   f"within {wait_s:g} s", str(path))
            if not got:
                return b""
            first = got
        os.set_blocking(fd, True)
        chunks, n = [first], len(first)
        while n < limit:
            b = raw.read(limit - n)
            if not b:
                break
            chunks.append(b)
            n += len(b)
        return b"".join(chunks)[:limit]


def _first_bytes(fd: int, wait_s: float) -> bytes | None:
    """The first bytes of a FIFO opened without waiting; None when no writer came in
    ``wait_s`` (a read with no writer is end-of-file); once a writer is there (a read is
    ``EAGAIN``), its bytes are waited for as from any pipe (``b""``: it wrote none)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            b = os.read(fd, 65536)
        except BlockingIOError:  # a writer is there, with nothing written yet
            os.set_blocking(fd, True)
            return os.read(fd, 65536)
        if b:
            return b
        if time.monotonic() >= deadline:
            return None
        time.sleep(_POLL_S)


def write_text(path: str | Path, text: str, wait_s: float | None = None) -> None:
    """``text`` into ``path``, made or truncated (``OSError`` as ``open`` raises it). A
    FIFO that no reader opens within ``wait_s`` (default ``PEER_WAIT_S``) is ``ENXIO``."""
    deadline = time.monotonic() + (PEER_WAIT_S if wait_s is None else wait_s)
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NONBLOCK, 0o666)
            break
        except OSError as e:  # ENXIO: a FIFO with no reader yet
            if e.errno != errno.ENXIO or time.monotonic() >= deadline:
                raise
            time.sleep(_POLL_S)
    if _NONBLOCK:
        os.set_blocking(fd, True)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
