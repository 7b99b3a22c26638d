"""A whole run: trace in, endpoints up, stages of lanes (closed loop) or arrivals (open
loop), results written as they arrive, everything closed and ``run.json`` finished
whatever happens (deadline, Ctrl-C, crash)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench.errors import InputError, ResultsWriteError
from agentbench.prompts.layout import BlockCache
from agentbench.replay.clock import VIRTUAL, now_ns_of
from agentbench.replay.endpoints import (
    LiveEndpoint,
    Router,
    close_endpoint,
    open_endpoint,
    opened,
)
from agentbench.replay.overflow import classifier
from agentbench.replay.progress import Progress, plan_of
from agentbench.replay.schedule import NS
from agentbench.replay.scrape import http_collector, sample_collector, scrape_loop
from agentbench.replay.stages import (
    Health,
    TreeSource,
    flush_loop,
    max_lanes,
    quiet_gc,
    restore_gc,
    run_stage,
    stages_of,
)
from agentbench.replay.timers import Timers
from agentbench.replay.tree import RunContext, tree_specs
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
from agentbench.traces.stats import potential_cached_tokens
from agentbench.transport.loop import running_loop_name


@dataclass
class RunResult:
    run_dir: Path
    info: dict[str, Any]


async def _auto_workers(scenario: Any, endpoints: list[LiveEndpoint],
                        caches: dict[str, BlockCache], info: dict[str, Any],
                        one_process: bool) -> int:
    """``--workers auto`` (:mod:`agentbench.replay.autoworkers`): probe each endpoint's
    stream rate and pick the worker count; recorded in run.json."""
    from agentbench.replay.autoworkers import choose, stream_rate
    from agentbench.replay.workers import resolve_workers

    rates = [await stream_rate(e, caches[e.api]) for e in endpoints]
    pick = choose(rates, max_lanes(scenario.load),
                  any(e.kind == "simulated" for e in scenario.endpoints))
    n = 1 if one_process else resolve_workers(pick["workers"], scenario)
    if one_process:
        pick["why"] += "; one process: rows are reported to on_request"
    info["workers"] = n
    info["workers_auto"] = pick
    return n


def load_trace(scenario: Any) -> Trace:
    from agentbench.traces.load import load_scenario_trace

    return load_scenario_trace(scenario.trace, scenario.seed)


async def run_scenario(scenario: Any, *, trace: Trace | None = None,
                       progress: bool | None = None,
                       on_request: Callable[[dict[str, Any]], None] | None = None,
                       on_start: Callable[[Path], None] | None = None,
                       workers: int | str | None = 1) -> RunResult:
    """Replay ``scenario`` and write ``results/<run-id>/``; return where it went.

    ``workers`` (a count or ``auto``) shards the lanes over that many worker processes
    (:mod:`agentbench.replay.workers`); 1 runs everything in this event loop. A
    virtual-clock run (``scenario.clock_mode``) must run on the ``VirtualEventLoop``
    (``agentbench.replay.run`` does that) and always uses one process: one discrete-event
    clock, so any ``workers`` gives the same records."""
    from agentbench.replay.workers import Fleet, resolve_workers

    clock = scenario.clock_mode  # VIRTUAL or WALL
    virtual = clock == VIRTUAL
    asked_workers = workers
    auto = not virtual and workers == "auto"  # decided once the endpoints are open
    n_workers = 1 if virtual or auto else resolve_workers(workers, scenario)
    if n_workers > 1 and on_request is not None:
        raise ValueError("on_request needs workers=1 (rows are written by worker processes)")
    if trace is None:
        trace = load_trace(scenario)
    specs = tree_specs(trace)
    potential = potential_cached_tokens(trace.sessions)
    run_dir = make_run_dir(scenario.output.dir, scenario.name, scenario.output.run_id)
    from agentbench.scenario.secrets import secrets_of

    secrets = tuple(s for e in scenario.endpoints for s in secrets_of(e))
    info = run_info(scenario, secrets, run_dir, trace=trace)
    info["trace"] = {"name": trace.name, "trees": len(specs), "sessions": len(trace.sessions),
                     "requests": trace.n_requests()}
    if trace.skipped:
        info["trace"]["skipped_bad_files"] = list(trace.skipped)
    # the word set's recorded name (stable across releases; the code is prompts/words.py)
    info["prompt_words"] = scenario.prompt.tokenizer or "agentbench.tokenize synthetic words"
    info["workers"] = n_workers
    info["time_base"] = clock
    info["event_loop"] = "virtual" if virtual else running_loop_name()
    info["rules"] = run_rules(scenario)
    if virtual:
        info["clock"] = {"kind": "virtual: simulated ns from the run start (one discrete-event "
                                 "clock for the replay and the simulator; no wall time)"}
        if asked_workers not in (None, 1, "1"):
            info["workers_note"] = (f"--workers {asked_workers} ignored: a virtual-clock run "
                                    "is one process")
    write_run_json(run_dir, info, secrets)
    reserve_space(run_dir)
    if on_start is not None:
        on_start(run_dir)
    writer = ResultsWriter(run_dir)
    main = asyncio.current_task()
    if main is not None:  # a disk that refuses the results stops the run
        writer.on_failure = lambda _e: main.cancel()
    wall_t0 = time.perf_counter_ns()
    t0 = 0 if virtual else wall_t0
    if not virtual:
        info["clock"]["t0_perf_ns"] = t0  # to line up with server-side logs on the same host
    now_ns = now_ns_of(clock, t0)
    cap = scenario.timing.idle_cap_for(clock)
    timers = Timers(t0, None if cap is None else int(cap * NS), now_ns)
    endpoints: list[LiveEndpoint] = []
    stop_bg = asyncio.Event()
    bg: list[asyncio.Task[Any]] = []
    bar: Progress | None = None
    status = "crashed"
    refused = False
    frozen = False
    gc_old = (0, 0, 0)
    health = Health()
    fleet: Fleet | None = None
    sigterm = _cancel_on_sigterm()
    try:
        vocab = None
        if scenario.prompt.tokenizer:
            from agentbench.prompts.vocab import vocab_from_tokenizer

            vocab = vocab_from_tokenizer(scenario.prompt.tokenizer)
        caches = {api: BlockCache(api, vocab) for api in {e.api for e in scenario.endpoints}}
        try:
            for i, cfg in enumerate(scenario.endpoints):
                endpoints.append(await open_endpoint(cfg, i, caches,
                                                     now_ns if virtual else None))
                endpoints[-1].amend = classifier(cfg.context_overflow_phrases)
        except InputError:
            refused = True  # unreachable, or refused the key or model: nothing was run
            raise
        info["endpoints"] = [{"label": e.label, "api": e.api, "ignore_eos": e.ignore_eos,
                              "prompt_overhead_tokens": e.overhead, "notes": e.notes}
                             for e in endpoints]
        if auto:
            n_workers = await _auto_workers(scenario, endpoints, caches, info,
                                            on_request is not None)
            write_run_json(run_dir, info, secrets)
        flavors = {(e.api, e.overhead, e.sim_block) for e in endpoints}
        ctx = RunContext(
            t0_ns=t0, seed=scenario.seed, strategy=scenario.timing.strategy,
            time_scale=scenario.timing.time_scale, api_scale=scenario.timing.api_scale,
            shared_prefix_tokens=scenario.prompt.shared_prefix_tokens, timers=timers,
            writer=writer, endpoints=endpoints,
            router=Router(scenario.routing, endpoints, scenario.seed),
            caches=caches, potential=potential, on_request=on_request,
            flavor=next(iter(flavors)) if len(flavors) == 1 else None)
        if scenario.server_metrics.enabled:
            every = scenario.server_metrics.interval_for(clock)
            for e in endpoints:
                collect = (sample_collector(e.transport.metrics_samples, e.label)
                           if e.transport is not None else
                           http_collector(e.http, e.metrics_url, e.label)
                           if e.metrics_url and e.http is not None else None)
                if collect is not None:
                    bg.append(asyncio.ensure_future(scrape_loop(
                        collect, every, timers.now_ns, writer.add_server_samples, stop_bg)))
        if n_workers > 1:
            fleet = Fleet(n_workers, scenario, trace,
                          [opened(e) for e in endpoints], t0, run_dir)
            await fleet.start()
        counters = fleet.view() if fleet else ctx
        bar = Progress(plan_of(scenario, specs, len(stages_of(scenario.load))), timers.now_ns,
                       enabled=progress)
        bg.append(asyncio.ensure_future(bar.loop(counters, stop_bg)))
        bg.append(asyncio.ensure_future(flush_loop(writer, stop_bg,
                                                    10.0 if virtual else 1.0)))
        source = TreeSource(specs, scenario.limits.recycle)
        # everything made so far (modules, trace, pools) lives for the whole run: keep it
        # out of the collector's full passes, which otherwise stall the loop for tens of ms
        gc_old = quiet_gc()
        frozen = True
        gc.callbacks.append(health.gc_callback)
        if not virtual:  # loop stalls are wall-clock events: none in virtual time
            bg.append(asyncio.ensure_future(health.watch(stop_bg)))
        for k, stage in enumerate(stages_of(scenario.load)):
            bar.begin_stage(counters, k, stage.label)
            t_start = timers.now_ns()
            if fleet is not None:
                await fleet.run_stage(k, stage, t_start)
                profile = fleet.source.profile_start_ns()
            else:
                source.restart()
                await run_stage(ctx, scenario, stage, k, source, trace)
                profile = source.profile_start_ns()
            # the profiling phase (limits.duration_s) starts once every lane is warm
            info["stages"].append({"label": stage.label, "start_ns": t_start,
                                   "profile_start_ns": t_start if profile is None else profile,
                                   "end_ns": timers.now_ns(), "lanes": stage.lanes,
                                   "rate_per_s": stage.rate_per_s})
            write_run_json(run_dir, info, secrets)
        bar.complete()
        status = "completed"
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "interrupted"
        raise
    finally:
        if sigterm is not None:
            sigterm()
        if frozen:
            restore_gc(gc_old)
            gc.callbacks.remove(health.gc_callback)
        if fleet is not None:
            await fleet.close(interrupt=status != "completed")
        stop_bg.set()
        if bg:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*bg, return_exceptions=True), 15)
        for live in endpoints:
            await close_endpoint(live)
        if bar is not None:
            bar.close()
        writer.on_failure = None
        writer.close()
        release_space(run_dir)  # room for run.json, whatever the disk did
        if writer.failure is not None:
            status = "results_write_failed"
            info["results_write_error"] = writer.failure.reason
        info["status"] = status
        info["end_wall"] = __import__("datetime").datetime.now(
            __import__("datetime").UTC).isoformat()
        info["duration_ns"] = timers.now_ns()
        info["wall_duration_ns"] = time.perf_counter_ns() - wall_t0
        info["idle_pulled_in_ns"] = timers.pulled_in_ns
        info["requests_written"] = writer.kept
        info["client_health"] = health.summary()
        if fleet is not None:
            for c in fleet.closed:
                if c.get("write_error") and writer.failure is None:
                    writer.failure = ResultsWriteError(str(run_dir), c["write_error"])
            try:
                info["requests_written"] = fleet.merge(run_dir)
            except OSError as err:
                if writer.failure is None:
                    writer.failure = ResultsWriteError(str(run_dir), err.strerror or str(err))
            info["idle_pulled_in_ns"] = max(
                [c["idle_pulled_in_ns"] for c in fleet.closed], default=0)
            info["client_health"] = {"parent": info["client_health"],
                                     "workers": [c["client_health"] for c in fleet.closed]}
        try:
            write_run_json(run_dir, info, secrets)
        except OSError as err:
            if writer.failure is None:
                writer.failure = ResultsWriteError(str(run_dir / "run.json"),
                                                   err.strerror or str(err), writer.kept)
        if writer.failure is not None:
            raise _stopped_by(writer.failure, run_dir) from None
        if refused and writer.n_requests == 0:
            _remove_empty_run(run_dir)
    return RunResult(run_dir, info)


def _remove_empty_run(run_dir: Path) -> None:
    """Remove a run folder that holds nothing but agentbench's own empty start (a run refused
    at its preflight); one with anything else in it (an engine's log) stays."""
    import shutil

    from agentbench.results import schema as records
    from agentbench.results.spool import JOURNAL_SUFFIX, RESERVE_FILE, SCHEMAS, SPOOL_SUFFIX

    ours = {records.RUN_FILE, RESERVE_FILE, *SCHEMAS}
    names = [p.name for p in run_dir.iterdir()]
    if all(n in ours or n.endswith((SPOOL_SUFFIX, JOURNAL_SUFFIX)) for n in names):
        shutil.rmtree(run_dir, ignore_errors=True)


def _stopped_by(failure: ResultsWriteError, run_dir: Path) -> ResultsWriteError:
    """The one line a run stopped by its disk ends with: what failed, what was kept, and
    how to finish the files once there is room."""
    from agentbench.results.spool import has_spools

    if has_spools(run_dir):
        failure.hint = (f"free space, then `agentbench recover {run_dir}` writes the "
                        "parquet files")
    failure.args = (failure.one_line(),)
    return failure




def _cancel_on_sigterm() -> Callable[[], None] | None:
    """SIGTERM ends the run as Ctrl-C does (the run task is cancelled; every finished row and
    run.json are written). Returns the undo, or None where signals cannot be handled here
    (not the main thread, another platform)."""
    import signal

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is None:
        return None
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (NotImplementedError, RuntimeError, ValueError):
        return None

    def undo() -> None:
        loop.remove_signal_handler(signal.SIGTERM)

    return undo
