"""The executor seam: what runs a stage's lanes (docs/architecture.md).

The run (``agentbench.replay.runner``) opens the endpoints, writes run.json and walks the
load's stages; an executor runs each stage's lanes and, when the run ends, hands back what
its lanes wrote and how its client kept up. Two implementations:

- :class:`InProcess`: every lane in this event loop (virtual-clock runs always);
- :class:`Processes`: lanes sharded over worker processes (``--workers N``,
  :mod:`agentbench.replay.workers`), one tree sequence and one request budget;
- ``RayLanes`` (:mod:`agentbench.replay.raylanes`): the same over Ray actors on several
  hosts (``--ray`` for a variant that measures a real endpoint).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from agentbench.errors import ResultsWriteError
from agentbench.replay.context import RunContext
from agentbench.replay.stages import Stage, TreeSource, run_stage
from agentbench.results.writer import ResultsWriter
from agentbench.traces.model import Trace


class Executor(Protocol):
    """Runs the lanes of each stage of one run."""

    #: client processes the lanes run in (run.json ``workers``)
    workers: int

    async def start(self) -> None:
        """Ready to run stages (worker processes started and connected)."""
        ...

    def counters(self) -> Any:
        """Live counters for the progress bar (requests, errors, trees, in flight)."""
        ...

    async def run_stage(self, k: int, stage: Stage, start_ns: int) -> int | None:
        """Run stage ``k`` to its end; return when its profiling phase started (every
        lane warm), or None when it had no warmup."""
        ...

    def unreachable(self) -> dict[str, Any]:
        """After a stage: the endpoints its lanes gave up as unreachable and, when every
        endpoint was, why the run stops (run.json ``endpoints_unreachable``,
        ``stopped_reason``: ``RunContext.outcome``); empty when none was given up."""
        ...

    async def close(self, interrupt: bool, why: str | None = None) -> None:
        """Stop the lanes (``interrupt``: cancel what is in flight, as Ctrl-C does; their
        rows say ``why``, ``RunContext.cancel_reason``; None: the executor's own reason, a
        worker's disk, or the generic stop)."""
        ...

    def finish(self, run_dir: Path, info: dict[str, Any], writer: ResultsWriter) -> None:
        """After the run's own writer closed: rows written elsewhere into the run folder,
        and their count and the client's health into ``info`` (run.json)."""
        ...


class InProcess:
    """Every lane in this process's event loop."""

    workers = 1

    def __init__(self, ctx: RunContext, scenario: Any, trace: Trace,
                 source: TreeSource) -> None:
        self.ctx, self.scenario, self.trace, self.source = ctx, scenario, trace, source

    async def start(self) -> None:
        return None

    def counters(self) -> Any:
        return self.ctx

    async def run_stage(self, k: int, stage: Stage, start_ns: int) -> int | None:
        self.source.restart()
        await run_stage(self.ctx, self.scenario, stage, k, self.source, self.trace)
        return self.source.profile_start_ns()

    def unreachable(self) -> dict[str, Any]:
        return self.ctx.outcome()

    async def close(self, interrupt: bool, why: str | None = None) -> None:
        return None

    def finish(self, run_dir: Path, info: dict[str, Any], writer: ResultsWriter) -> None:
        return None


class Processes:
    """Lanes sharded over worker processes (:class:`agentbench.replay.fleet.Fleet`)."""

    def __init__(self, n: int, scenario: Any, trace: Trace, found: list[dict[str, Any]],
                 t0_ns: int, run_dir: Path) -> None:
        from agentbench.replay.fleet import Fleet

        self.workers = n
        self.fleet = Fleet(n, scenario, trace, found, t0_ns, run_dir)

    async def start(self) -> None:
        await self.fleet.start()

    def counters(self) -> Any:
        return self.fleet.view()

    async def run_stage(self, k: int, stage: Stage, start_ns: int) -> int | None:
        await self.fleet.run_stage(k, stage, start_ns)
        return self.fleet.source.profile_start_ns()

    def unreachable(self) -> dict[str, Any]:
        return self.fleet.unreachable()

    async def close(self, interrupt: bool, why: str | None = None) -> None:
        await self.fleet.close(interrupt=interrupt, why=why)

    def finish(self, run_dir: Path, info: dict[str, Any], writer: ResultsWriter) -> None:
        finish_workers(self.fleet, run_dir, info, writer)


def finish_workers(fleet: Any, run_dir: Path, info: dict[str, Any],
                   writer: ResultsWriter) -> None:
    """Workers' rows merged into the run folder (``fleet.merge``), their write errors, idle
    gaps pulled in and health (``fleet.closed``) into ``info``."""
    for c in fleet.closed:
        if c.get("write_error") and writer.failure is None:
            writer.failure = ResultsWriteError(str(run_dir), c["write_error"])
    try:
        info["requests_written"] = fleet.merge(run_dir)
    except OSError as err:
        if writer.failure is None:
            writer.failure = ResultsWriteError(str(run_dir), err.strerror or str(err))
    if writer.failure is not None:
        # a worker's disk stopped the run (which its early end made look ``crashed``): said
        # as a one-process run says it, with the rows a reader finds
        info["status"] = "results_write_failed"
        info["results_write_error"] = writer.failure.reason
        if isinstance(info.get("requests_written"), int):
            writer.failure.kept = info["requests_written"]
    info["idle_pulled_in_ns"] = max(
        [c["idle_pulled_in_ns"] for c in fleet.closed], default=0)
    info["client_health"] = {"parent": info["client_health"],
                             "workers": [c["client_health"] for c in fleet.closed]}
    # CPU seconds of each worker process (with a Ray actor's own threads), by worker
    info["workers_cpu_s"] = [c.get("cpu_s") for c in sorted(fleet.closed,
                                                            key=lambda c: c["worker"])]
