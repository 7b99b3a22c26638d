"""What reading a finished stream costs: each API's SSE reader (``agentbench.transport.sse``
for chat and completions, ``typed_sse`` for Responses and Messages) on a 128-token answer,
in microseconds per stream, in isolation (no socket: the chunks as the HTTP loop keeps
them). The shapes: one event a chunk (an engine's writes, ``fastserver --per-event``), the
whole body in one read (``nginx``), reads of 1,448 bytes that cut events anywhere, LF
events with ``: ping`` comments (the event-by-event path), and CRLF and CR line ends.

``--before DIR`` (another checkout's ``agentbench`` package, e.g. ``git archive HEAD
agentbench | tar -x -C DIR``) times that tree's readers too, alternating with this one's
in every round, so that a shared core's noise falls on both alike. The figure is the best
of ``--rounds`` rounds of ``--number`` calls.

    taskset -c 1 .venv/bin/python benchmarks/sse_bench.py [--before DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from agentbench.testing.fastserver import events
from agentbench.testing.shapes import shape
from agentbench.transport import sse, typed_sse

TOKENS = 128
Reader = Callable[[Sequence[bytes], Sequence[int]], Any]


def _module(tree: Path, name: str) -> ModuleType:
    """``agentbench/transport/<name>.py`` of another tree, as a module of its own."""
    spec = importlib.util.spec_from_file_location(
        f"before_{name}", tree / "agentbench" / "transport" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _typed(api: str) -> list[bytes]:
    w = shape(f"/v1/{api}")
    counts = (1000, 0, TOKENS)
    evs = [w.opening(counts)]
    evs += [w.token(" tok", i == TOKENS - 1, counts) for i in range(TOKENS)]
    return [e for e in (*evs, w.closing(counts, False), w.end(counts)) if e]


def _cut(body: bytes, size: int) -> list[bytes]:
    return [body[i:i + size] for i in range(0, len(body), size)]


def cases() -> dict[str, tuple[str, list[bytes]]]:
    """Name: (API, chunks) of each stream timed."""
    chat = events(True, TOKENS)
    body = b"".join(chat)
    pings = [c for i, e in enumerate(chat) for c in ((e, b": ping\n\n") if i % 16 == 15
                                                      else (e,))]
    return {
        "chat per-event": ("chat", chat),
        "chat one-read": ("chat", [body]),
        "chat 1448-byte reads": ("chat", _cut(body, 1448)),
        "chat per-event + pings": ("chat", pings),
        "completions per-event": ("completions", events(False, TOKENS)),
        "chat per-event CRLF": ("chat", [e.replace(b"\n", b"\r\n") for e in chat]),
        "chat per-event CR": ("chat", [e.replace(b"\n", b"\r") for e in chat]),
        "responses per-event": ("responses", _typed("responses")),
        "messages per-event": ("messages", _typed("messages")),
    }


def readers(chat: ModuleType, typed: ModuleType) -> dict[str, Reader]:
    return {"chat": chat.parse_stream, "completions": chat.parse_stream,
            "responses": lambda c, t: typed.parse_typed(c, t, "responses"),
            "messages": lambda c, t: typed.parse_typed(c, t, "messages")}


def best_us(read: Reader, chunks: list[bytes], times: list[int], number: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(number):
        read(chunks, times)
    return (time.perf_counter_ns() - t0) / number / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, default=None,
                    help="another tree's agentbench package (its parent folder)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--number", type=int, default=300)
    args = ap.parse_args()
    trees = {"this": readers(sse, typed_sse)}
    if args.before is not None:
        trees["before"] = readers(_module(args.before, "sse"), _module(args.before, "typed_sse"))
    print(f"{'stream':26}" + "".join(f"{k:>12}" for k in trees) + "  (us a stream, best)")
    for name, (api, chunks) in cases().items():
        times = list(range(len(chunks)))
        best = {k: float("inf") for k in trees}
        for r in range(args.rounds):
            for k in (list(trees) if r % 2 == 0 else list(reversed(trees))):
                best[k] = min(best[k], best_us(trees[k][api], chunks, times, args.number))
        results = [trees[k][api](chunks, times) for k in trees]
        notes = [f"{k}: {res.error_type}" for k, res in zip(trees, results, strict=True)
                 if res.error_type]
        print(f"{name:26}" + "".join(f"{best[k]:12.1f}" for k in trees)
              + (f"  ({'; '.join(notes)})" if notes else ""))


if __name__ == "__main__":
    main()
