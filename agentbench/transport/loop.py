"""The event loop a replay runs on: uvloop when it is installed (``pip install
'agentbench[fast]'``), else asyncio's own.

With every SSE event in its own socket read, the loop's work per read (wake-up, read,
callback) is most of the client's CPU per event; uvloop does it in C. Nothing else changes:
the same protocol, records and clock. ``AGENTBENCH_LOOP=asyncio`` keeps asyncio's loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable


def loop_name() -> str:
    """``uvloop`` when it is installed and not turned off, else ``asyncio``."""
    if os.environ.get("AGENTBENCH_LOOP", "").lower() == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def use_fast_loop() -> str:
    """Make later ``asyncio.run`` calls (and forked worker processes) use uvloop when
    ``loop_name()`` says so; return the loop's name."""
    name = loop_name()
    if name == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return name


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What ``asyncio.Runner(loop_factory=...)`` should make a wall-clock run's loop with:
    uvloop's when ``loop_name()`` says so, else None (asyncio's own). Unlike
    :func:`use_fast_loop` it sets no global policy (a notebook's or a test's loop stays
    as it is)."""
    if loop_name() != "uvloop":
        return None
    import uvloop

    return uvloop.new_event_loop


def running_loop_name() -> str:
    """``uvloop`` or ``asyncio``: the loop this code runs on (for run.json)."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") \
        else "asyncio"
