"""What the HTTP hot path (``agentbench.transport.stream``) costs in isolation, no socket:
per socket read, the reads of a 128-token chat answer (one HTTP chunk an event, each its
own read, the head first and the last chunk alone) fed to a connection's
``data_received``; per look of the request's timer (every ``END_GRACE_S``) for the bytes
of the stream's last event, the look over the reads since the last one (50 reads: half a
second of a 100 tokens/s answer; 130: a whole answer), for chat and Responses.

``--before DIR`` (another checkout's ``agentbench`` package, e.g. ``git archive HEAD
agentbench | tar -x -C DIR``) times that tree's ``stream.py`` too, alternating with this
one's in every round, so that a shared core's noise falls on both alike. The figure is the
best of ``--rounds`` rounds.

    taskset -c 1 .venv/bin/python benchmarks/stream_bench.py [--before DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from agentbench.testing.fastserver import events
from agentbench.testing.shapes import shape
from agentbench.transport import pool as connpool
from agentbench.transport import stream

HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


def _module(tree: Path) -> ModuleType:
    """``agentbench/transport/stream.py`` of another tree, as a module of its own."""
    spec = importlib.util.spec_from_file_location(
        "before_stream", tree / "agentbench" / "transport" / "stream.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _responses(tokens: int) -> list[bytes]:
    w = shape("/v1/responses")
    return [w.opening(None), *(w.token(" tok", False, None) for _ in range(tokens))]


def per_read_ns(mod: Any, number: int) -> float:
    """ns per ``data_received`` over a whole answer's reads (the head's included)."""
    reads = [HEAD, *map(_chunk, events(True, 128)), b"0\r\n\r\n"]
    conn = mod.Conn(connpool.Pool("http://127.0.0.1:9/v1/chat/completions"))
    conn.alive = True
    t0 = time.perf_counter_ns()
    for _ in range(number):
        conn.begin(0)
        for r in reads:
            conn.data_received(r)
    assert conn.done is not None and conn.done.done()
    return (time.perf_counter_ns() - t0) / (number * len(reads))


def per_look_us(mod: Any, api: str, reads: int, number: int) -> float:
    """us per look over ``reads`` new reads of token events (no last event among them)."""
    evs = events(True, reads) if api == "chat" else _responses(reads)
    conn = mod.Conn(connpool.Pool(f"http://127.0.0.1:9/v1/{api}"))
    conn.alive = True
    conn.begin(0, api)
    conn.data_received(HEAD)
    for e in evs[:reads]:
        conn.data_received(_chunk(e))
    t0 = time.perf_counter_ns()
    for _ in range(number):
        conn.looked, conn.tail = 0, b""
        conn._end_due()
    assert not conn.marked
    return (time.perf_counter_ns() - t0) / number / 1e3


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, default=None,
                    help="another tree's agentbench package (its parent folder)")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    trees = {"this": stream} | ({"before": _module(args.before)} if args.before else {})
    cases = {"per read (ns)": lambda m: per_read_ns(m, 300),
             **{f"per look, {api}, {n} reads (us)": (
                 lambda m, api=api, n=n: per_look_us(m, api, n, 2000))
                for api in ("chat", "responses") for n in (50, 130)}}
    print(f"{'':34}" + "".join(f"{k:>10}" for k in trees) + "  (best)")
    for name, run in cases.items():
        best = {k: float("inf") for k in trees}
        for r in range(args.rounds):
            for k in (list(trees) if r % 2 == 0 else list(reversed(trees))):
                best[k] = min(best[k], run(trees[k]))
        print(f"{name:34}" + "".join(f"{best[k]:10.2f}" for k in trees))


if __name__ == "__main__":
    asyncio.run(main())
