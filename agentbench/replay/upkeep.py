"""What a process runs beside its lanes during a run, shared by the single-process runner
(``runner``) and the worker processes (``workers``): the garbage collector quieted for the
run, the watch on the client's own health (event-loop stalls, collector pauses) and the
spool flusher."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from agentbench.replay.clock import Pause
from agentbench.results.writer import ResultsWriter

#: the collector's first threshold during a run: a streamed request allocates dozens of
#: containers (reads, records, rows), so the default 700 starts a young collection every
#: few requests and an older one every few dozen; a higher threshold makes them rarer
GC_THRESHOLD0 = 20_000


def quiet_gc(collect: bool = True) -> tuple[int, int, int]:
    """Before a run: collect (unless ``collect`` is False: in virtual time a pause costs
    nothing measured, and a full pass costs ~50 ms of CPU), freeze what exists (modules,
    trace, pools live for the whole run, so full passes need not walk them) and raise the
    young threshold; return the old thresholds for :func:`restore_gc`."""
    if collect:
        gc.collect()
    gc.freeze()
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], GC_THRESHOLD0), old[1], old[2])
    return old


def restore_gc(old: tuple[int, int, int]) -> None:
    gc.unfreeze()
    gc.set_threshold(*old)


class Health:
    """How often the client itself could not run on time: event-loop stalls (a 10 ms
    sleep that overslept) and garbage-collector pauses. Written to run.json so a slow
    figure can be told apart from a stalled client (or a busy machine)."""

    def __init__(self) -> None:
        self.stalls_ms: list[float] = []
        self.gc_ms: list[float] = []
        self._gc_t0 = 0.0

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self.gc_ms.append((time.perf_counter() - self._gc_t0) * 1e3)

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            late = (time.perf_counter() - t) * 1e3 - 10.0
            if late > 2.0:
                self.stalls_ms.append(late)

    def summary(self) -> dict[str, Any]:
        return {"loop_stalls_over_2ms": len(self.stalls_ms),
                "loop_stalls_over_10ms": sum(x > 10 for x in self.stalls_ms),
                "loop_stall_max_ms": round(max(self.stalls_ms, default=0.0), 3),
                "gc_pauses": len(self.gc_ms),
                "gc_pauses_over_10ms": sum(x > 10 for x in self.gc_ms),
                "gc_pause_max_ms": round(max(self.gc_ms, default=0.0), 3),
                "note": "loop stalls include time the OS gave the CPU to other processes"}


#: rows (of all tables) between two spool flushes of a virtual-time run: about what one
#: wall second of such a run writes (a few thousand requests and their server samples)
VIRTUAL_FLUSH_ROWS = 16_384


async def flush_loop(writer: ResultsWriter, stop: asyncio.Event,
                     every_s: float = 1.0) -> None:
    """Spool buffered rows to disk every ``every_s`` seconds and once ``stop`` is set
    (wall-clock runs; in virtual time the writer flushes as rows come in, every
    ``VIRTUAL_FLUSH_ROWS`` rows: ``ResultsWriter.flush_every_rows``)."""
    pause = Pause(stop)
    try:
        while not stop.is_set():
            await pause.until_stop(every_s)
            writer.flush()
    finally:
        pause.close()
