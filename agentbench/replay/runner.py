"""A whole run: trace in, endpoints up, stages of lanes (closed loop) or arrivals (open
loop), results written as they arrive, everything closed and ``run.json`` finished
whatever happens (deadline, Ctrl-C, crash)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench.errors import InputError, ResultsWriteError
from agentbench.prompts.layout import BlockCache
from agentbench.replay.clock import VIRTUAL, now_ns_of
from agentbench.replay.context import RunContext
from agentbench.replay.endpoints import (
    LiveEndpoint,
    Router,
    close_endpoint,
    open_endpoint,
    opened,
)
from agentbench.replay.executor import Executor, InProcess, Processes
from agentbench.replay.overflow import classifier
from agentbench.replay.progress import Progress, plan_of
from agentbench.replay.runend import remove_empty_run, stopped_by
from agentbench.replay.runsetup import auto_workers, load_trace, modeled_gpus_of
from agentbench.replay.schedule import NS
from agentbench.replay.scrape import scrape_loop
from agentbench.replay.sigterm import cancel_on_sigterm
from agentbench.replay.stages import TreeSource, stages_of
from agentbench.replay.timers import Timers
from agentbench.replay.treespec import tree_specs
from agentbench.replay.upkeep import (
    VIRTUAL_FLUSH_ROWS,
    Health,
    flush_loop,
    quiet_gc,
    restore_gc,
)
from agentbench.results.rundir import (
    make_run_dir,
    release_space,
    reserve_space,
    run_info,
    write_run_json,
)
from agentbench.results.writer import ResultsWriter
from agentbench.scenario.rules import run_rules
from agentbench.traces.model import Trace
from agentbench.traces.stats import Potential
from agentbench.transport.loop import running_loop_name


@dataclass
class RunResult:
    run_dir: Path
    info: dict[str, Any]


#: makes the executor of a run once its endpoints are open (``executor=`` of
#: :func:`run_scenario`): (worker count, the run) -> Executor
ExecutorFactory = Callable[[int, "_Run"], Executor]


def default_executor(n_workers: int, run: _Run) -> Executor:
    """Lanes in this process (one worker), else sharded over ``n_workers`` processes."""
    if n_workers > 1:
        return Processes(n_workers, run.scenario, run.trace,
                         [opened(e) for e in run.endpoints], run.t0, run.run_dir)
    return InProcess(run.ctx, run.scenario, run.trace,
                     TreeSource(run.specs, run.scenario.limits.recycle))


async def run_scenario(scenario: Any, *, trace: Trace | None = None,
                       progress: bool | None = None,
                       on_request: Callable[[dict[str, Any]], None] | None = None,
                       on_start: Callable[[Path], None] | None = None,
                       on_open: Callable[[Path], None] | None = None,
                       workers: int | str | None = 1,
                       executor: ExecutorFactory | None = None) -> RunResult:
    """Replay ``scenario`` and write ``results/<run-id>/``; return where it went.

    ``workers`` (a count or ``auto``) shards the lanes over that many worker processes
    (:mod:`agentbench.replay.workers`); 1 runs everything in this event loop. A
    virtual-clock run (``scenario.clock_mode``) must run on the ``VirtualEventLoop``
    (``agentbench.replay.run`` does that) and always uses one process: one discrete-event
    clock, so any ``workers`` gives the same records. ``executor`` makes the executor
    that runs the lanes (:mod:`agentbench.replay.executor`; default: ``default_executor``).
    ``on_start`` is told the run folder when it is made, ``on_open`` once the endpoints are
    open and the run goes ahead (a run the pre-run check refuses never gets there)."""
    from agentbench.replay.workers import resolve_workers

    virtual = scenario.clock_mode == VIRTUAL
    auto = not virtual and workers == "auto"  # decided once the endpoints are open
    # checked in virtual time too, where it is one process whatever it says (--workers abc
    # passed there without a word)
    n_workers = 1 if auto else resolve_workers(workers, scenario)
    if virtual:
        n_workers = 1
    if n_workers > 1 and on_request is not None:
        raise ValueError("on_request needs workers=1 (rows are written by worker processes)")
    if trace is None:
        trace = load_trace(scenario)
    run = _Run(scenario, trace, n_workers, workers, on_request)
    run.on_open = on_open
    if on_start is not None:
        on_start(run.run_dir)
    await run.go(auto, progress, executor or default_executor)
    return RunResult(run.run_dir, run.info)


class _Run:
    """One run while it goes: its folder, writer, clock, endpoints and background tasks,
    and what ``finish`` must close and record whatever happens."""

    def __init__(self, scenario: Any, trace: Trace, n_workers: int, asked: Any,
                 on_request: Callable[[dict[str, Any]], None] | None) -> None:
        self.scenario, self.trace, self.n_workers = scenario, trace, n_workers
        self.on_request = on_request
        #: told the run folder once the endpoints are open (a run the pre-run check
        #: refused has none: its folder is removed)
        self.on_open: Callable[[Path], None] | None = None
        self.clock = scenario.clock_mode  # VIRTUAL or WALL
        self.virtual = self.clock == VIRTUAL
        self.specs = tree_specs(trace)
        self.potential = trace.memo.get("potential") or Potential(trace.sessions)
        self.run_dir = make_run_dir(scenario.output.dir, scenario.name, scenario.output.run_id)
        try:
            self._start_files(scenario, trace, asked)
        except BaseException:  # SIGTERM, Ctrl-C, an error before run.json: no claim left
            with contextlib.suppress(OSError):
                remove_empty_run(self.run_dir)
            raise

    def _start_files(self, scenario: Any, trace: Trace, asked: Any) -> None:
        """run.json as the run starts (the folder's claim then goes), and the disk space
        kept back for the run's last files."""
        from agentbench.scenario.secrets import secrets_of

        self.secrets = tuple(s for e in scenario.endpoints for s in secrets_of(e))
        self.info = info = run_info(scenario, self.secrets, self.run_dir, trace=trace)
        info["trace"] = {"name": trace.name, "trees": len(self.specs),
                         "sessions": len(trace.sessions), "requests": trace.n_requests()}
        if trace.skipped:
            info["trace"]["skipped_bad_files"] = list(trace.skipped)
        # the word set's recorded name (stable across releases; the code is traces/words.py)
        info["prompt_words"] = scenario.prompt.tokenizer or "agentbench.tokenize synthetic words"
        info["workers"] = self.n_workers
        info["time_base"] = self.clock
        info["event_loop"] = "virtual" if self.virtual else running_loop_name()
        info["rules"] = run_rules(scenario)
        if self.virtual:
            info["clock"] = {"kind": "virtual: simulated ns from the run start (one "
                                     "discrete-event clock for the replay and the simulator; "
                                     "no wall time)"}
            if asked not in (None, 1, "1"):
                info["workers_note"] = (f"--workers {asked} ignored: a virtual-clock run "
                                        "is one process")
        try:
            write_run_json(self.run_dir, info, self.secrets)
        except OSError as e:  # a full disk: named with the folder, as a row's write is
            err = ResultsWriteError(str(self.run_dir.parent), e.strerror or str(e))
            err.hint = "the run did not start (its folder is removed)"
            raise err from None
        reserve_space(self.run_dir)

    async def go(self, auto: bool, progress: bool | None, make: ExecutorFactory) -> None:
        """Open the endpoints, run every stage, and finish the run whatever happens."""
        self.writer = writer = ResultsWriter(self.run_dir)
        main = asyncio.current_task()
        if main is not None:  # a disk that refuses the results stops the run
            writer.on_failure = lambda e: self._stop(
                main, f"the results could not be written ({e.reason})")
        self.wall_t0 = time.perf_counter_ns()
        self.t0 = t0 = 0 if self.virtual else self.wall_t0
        if not self.virtual:
            # to line up with server-side logs on the same host
            self.info["clock"]["t0_perf_ns"] = t0
        self.now_ns = now_ns_of(self.clock, t0)
        cap = self.scenario.timing.idle_cap_for(self.clock)
        self.timers = Timers(t0, None if cap is None else int(cap * NS), self.now_ns)
        self.endpoints: list[LiveEndpoint] = []
        self.stop_bg = asyncio.Event()
        self.bg: list[asyncio.Task[Any]] = []
        self.bar: Progress | None = None
        self.refused = False
        self.frozen = False
        self.gc_old = (0, 0, 0)
        self.health = Health()
        self.executor: Executor | None = None
        status = "crashed"
        sigterm = cancel_on_sigterm(
            lambda: self._stop(None, "the run was stopped by SIGTERM"))
        try:
            await self._open(auto)
            if self.on_open is not None:  # the endpoints answered: the run goes ahead
                self.on_open(self.run_dir)
            await self._stages(progress, make)
            status = "completed"
        except (asyncio.CancelledError, KeyboardInterrupt):
            status = "interrupted"
            raise
        finally:
            if sigterm is not None:
                sigterm.hold()
            try:
                await self._finish(status)
            finally:
                if sigterm is not None:
                    sigterm.undo()
        if sigterm is not None and sigterm.came:  # while a completed run's files were
            raise asyncio.CancelledError  # written: it stays complete, and the process stops
        if sigterm is not None and sigterm.int_came:  # a Ctrl-C, the same way
            raise KeyboardInterrupt

    def _stop(self, task: asyncio.Task[Any] | None, why: str) -> None:
        """Say ``why`` the run stops (the message of the requests it cancels), then cancel
        ``task`` (None: the caller cancels it)."""
        ctx = getattr(self, "ctx", None)
        if ctx is not None and ctx.cancel_reason is None:
            ctx.cancel_reason = why
        if task is not None:
            task.cancel()

    async def _open(self, auto: bool) -> None:
        """Endpoints open, the run context ready, server-metrics collection started."""
        sc, info = self.scenario, self.info
        vocab = None
        if sc.prompt.tokenizer and not self.virtual:  # virtual time sends no text
            from agentbench.prompts.vocab import vocab_from_tokenizer

            vocab = vocab_from_tokenizer(sc.prompt.tokenizer)
        caches = {api: BlockCache(api, vocab) for api in {e.api for e in sc.endpoints}}
        try:
            for i, cfg in enumerate(sc.endpoints):
                self.endpoints.append(await open_endpoint(
                    cfg, i, caches, self.now_ns if self.virtual else None))
                self.endpoints[-1].amend = classifier(cfg.context_overflow_phrases)
        except InputError:
            self.refused = True  # unreachable, or refused the key or model: nothing was run
            raise
        endpoints = self.endpoints
        info["endpoints"] = [{"label": e.label, "api": e.api,
                              "ignore_eos": e.transport.ignore_eos,
                              "prompt_overhead_tokens": e.transport.overhead,
                              "notes": e.transport.notes,
                              # GPUs a simulated endpoint models (hardware.gpus is checked
                              # against their sum); None: a real endpoint, or not said
                              "modeled_gpus": modeled_gpus_of(cfg)}
                             for e, cfg in zip(endpoints, sc.endpoints, strict=True)]
        if auto:
            self.n_workers = await auto_workers(sc, endpoints, caches, info,
                                                self.on_request is not None)
            write_run_json(self.run_dir, info, self.secrets)
        flavors = {e.transport.flavor for e in endpoints}
        self.ctx = RunContext(
            t0_ns=self.t0, seed=sc.seed, strategy=sc.timing.strategy,
            time_scale=sc.timing.time_scale, api_scale=sc.timing.api_scale,
            shared_prefix_tokens=sc.prompt.shared_prefix_tokens, timers=self.timers,
            writer=self.writer, endpoints=endpoints,
            router=Router(sc.routing, endpoints, sc.seed),
            caches=caches, potential=self.potential, on_request=self.on_request,
            flavor=endpoints[0].transport if len(flavors) == 1 else None,
            prompt_memo=self.trace.memo.get("prompts"))
        if sc.server_metrics.enabled:
            every = sc.server_metrics.interval_for(self.clock)
            for e in endpoints:
                collect = e.transport.collector()
                if collect is not None:
                    self.bg.append(asyncio.ensure_future(scrape_loop(
                        collect, every, self.timers.now_ns, self.writer.add_server_samples,
                        self.stop_bg)))

    async def _stages(self, progress: bool | None, make: ExecutorFactory) -> None:
        """Every stage of the load, run by the executor; run.json after each."""
        sc, info, timers = self.scenario, self.info, self.timers
        executor = self.executor = make(self.n_workers, self)
        await executor.start()
        if not self.virtual:  # the executor may have placed its workers (Ray: run.json ray)
            self.n_workers = info["workers"] = executor.workers
            write_run_json(self.run_dir, info, self.secrets)
        counters = executor.counters()
        self.bar = bar = Progress(plan_of(sc, self.specs, len(stages_of(sc.load))),
                                  timers.now_ns, enabled=progress)
        if bar.shown and self.virtual:
            # drawn as rows come, at most twice a wall second: a loop on the simulated clock
            # woke every simulated second, through idle gaps too (a day of them: 86,400)
            self.writer.on_tick = lambda: bar.refresh(counters)
        elif bar.shown:
            self.bg.append(asyncio.ensure_future(bar.loop(counters, self.stop_bg)))
        if self.virtual:  # rows come fast in simulated time: the writer flushes as they do
            self.writer.flush_every_rows = VIRTUAL_FLUSH_ROWS
        else:
            self.bg.append(asyncio.ensure_future(flush_loop(self.writer, self.stop_bg)))
        # everything made so far (modules, trace, pools) lives for the whole run: keep it
        # out of the collector's full passes, which otherwise stall the loop for tens of ms
        self.gc_old = quiet_gc(collect=not self.virtual)
        self.frozen = True
        gc.callbacks.append(self.health.gc_callback)
        if not self.virtual:  # loop stalls are wall-clock events: none in virtual time
            self.bg.append(asyncio.ensure_future(self.health.watch(self.stop_bg)))
        for k, stage in enumerate(stages_of(sc.load)):
            # cold_stages: every endpoint's cache dropped before the stage (what it said);
            # an engine that refuses stops the run there, as a dead endpoint does
            try:
                resets = [await e.transport.reset_cache() for e in self.endpoints] \
                    if sc.cold_stages else None
            except InputError as err:
                info["stopped_reason"] = (f"stage {k + 1} ({stage.label}) not run: "
                                          f"{err.one_line()}")
                write_run_json(self.run_dir, info, self.secrets)
                return
            bar.begin_stage(counters, k, stage.label)
            t_start = timers.now_ns()
            profile = await executor.run_stage(k, stage, t_start)
            # the profiling phase (limits.duration_s) starts once every lane is warm
            info["stages"].append({"label": stage.label, "start_ns": t_start,
                                   "profile_start_ns": t_start if profile is None else profile,
                                   "end_ns": timers.now_ns(), "lanes": stage.lanes,
                                   "rate_per_s": stage.rate_per_s,
                                   **({} if resets is None else {"cache_reset": resets})})
            # endpoints given up as unreachable; every one of them: the run stops here
            gone = executor.unreachable()
            info.update(gone)
            write_run_json(self.run_dir, info, self.secrets)
            if "stopped_reason" in gone:
                return
        bar.complete()

    async def _finish(self, status: str) -> None:
        """Close everything, write run.json with the run's outcome; raise what stopped a
        run whose results could not be written."""
        info, writer, run_dir = self.info, self.writer, self.run_dir
        # the run is ending: a write that fails from here on (the flush loop's last flush,
        # on a full disk) must not cancel the task again in the middle of this cleanup
        writer.on_failure = None
        if self.frozen:
            restore_gc(self.gc_old)
            gc.callbacks.remove(self.health.gc_callback)
        if self.executor is not None:
            ctx = getattr(self, "ctx", None)  # its cancel_reason: SIGTERM, this writer
            await self.executor.close(interrupt=status != "completed",
                                      why=None if ctx is None else ctx.cancel_reason)
        self.stop_bg.set()
        if self.bg:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*self.bg, return_exceptions=True), 15)
        for live in self.endpoints:
            await close_endpoint(live)
        if self.bar is not None:
            writer.tick()  # the last figures, as the loop's last turn draws them
            writer.on_tick = None
            with contextlib.suppress(Exception):  # a display on a closed stderr
                self.bar.close()
        writer.close()
        release_space(run_dir)  # room for run.json, whatever the disk did
        if writer.failure is not None:
            status = "results_write_failed"
            info["results_write_error"] = writer.failure.reason
        info["status"] = status
        info["end_wall"] = datetime.datetime.now(datetime.UTC).isoformat()
        info["duration_ns"] = self.timers.now_ns()
        info["wall_duration_ns"] = time.perf_counter_ns() - self.wall_t0
        info["idle_pulled_in_ns"] = self.timers.pulled_in_ns
        info["requests_written"] = writer.kept
        info["client_health"] = self.health.summary()
        if self.executor is not None:
            self.executor.finish(run_dir, info, writer)
        try:
            write_run_json(run_dir, info, self.secrets)
        except OSError as err:
            if writer.failure is None:
                writer.failure = ResultsWriteError(str(run_dir / "run.json"),
                                                   err.strerror or str(err), writer.kept)
        if writer.failure is not None:
            raise stopped_by(writer.failure, run_dir) from None
        if self.refused and writer.n_requests == 0:
            remove_empty_run(run_dir)
