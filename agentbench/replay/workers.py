"""Lanes sharded over worker processes, one event loop each, so the client scales past one
core (``agentbench run --workers N|auto``).

The parent process opens the endpoints once (starts the simulator, probes, calibrates),
scrapes server metrics and shows progress; each worker reconnects to the same endpoints
with its own connection pool and replays its share of every stage:

- lanes: worker ``w`` of ``W`` runs lanes ``w, w + W, ...`` (global lane numbers), every
  lane drawing its next tree from one sequence in shared memory, so a lane and each of its
  trees stay in one process and the trees, copies and prompts are the single-process ones;
- open loop: worker ``w`` takes arrivals ``k`` with ``k % W == w`` of the one seeded
  arrival sequence (``max_concurrency`` is split between workers);
- one clock: every worker stamps ``perf_counter_ns() - t0`` with the parent's ``t0``
  (CLOCK_MONOTONIC is system-wide on Linux), so records line up as if one process took them;
- the stage's request budget is one shared counter; ``duration_s`` counts from the stage
  start the parent sets;
- start: forked where the platform can (see ``start_method``), spawned elsewhere;
- results: each worker writes its own spool under ``<run>/workers/w<k>/``; the parent
  merges them into the run folder's parquet files at the end (also after Ctrl-C or a
  crash: a worker's cut-short spool is recovered).

Ctrl-C and SIGTERM go to the parent alone (workers ignore both): it raises a shared flag, every
worker cancels its stage like a single-process run does (in-flight requests recorded as
cancelled), writes its files and exits; a worker whose parent died does the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import multiprocessing
import os
import signal
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.replay.clock import WALL, run_on
from agentbench.replay.shared import Shared
from agentbench.replay.sigterm import stop_reason
from agentbench.replay.stages import Shard, max_shards, run_stage
from agentbench.replay.upkeep import Health, flush_loop, quiet_gc, restore_gc
from agentbench.results.spool import PART_FILE

_POLL_S = 0.01
#: the most worker processes a run starts: a guard against typos, as the other counts'
#: (an open loop has no lanes to bound them by: 2**70 overflowed the shared memory)
MAX_WORKERS = 1024


def resolve_workers(workers: int | str | None, scenario: Any) -> int:
    """Worker processes for ``workers`` (a count, or ``auto`` without a stream-rate probe:
    one per CPU this process may use, one fewer when a simulated endpoint runs in the
    parent; a run's ``auto`` is :mod:`agentbench.replay.autoworkers`), never more than
    lanes, nor than an open loop's ``max_concurrency``."""
    if workers is None:
        return 1
    if workers == "auto":
        n = len(os.sched_getaffinity(0))
        if scenario.runs_simulator:
            n -= 1
    else:
        try:
            n = int(workers)
        except ValueError:
            raise InputError("workers must be a positive integer or 'auto', not "
                             f"{repr(workers)[:40]}", field="workers") from None
        if n < 1:
            raise InputError(f"workers must be at least 1, not {n}", field="workers")
        if n > MAX_WORKERS:
            raise InputError(f"at most {MAX_WORKERS:,} worker processes, not "
                             f"{str(workers)[:40]}", field="workers")
    most = max_shards(scenario.load)
    if most is not None:
        n = min(n, most)
    return max(1, n)


class PipeLink:
    """A worker's messages to and from its parent over a ``multiprocessing`` pipe."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def send(self, msg: tuple[Any, ...]) -> None:
        self.conn.send(msg)

    def listen(self, loop: asyncio.AbstractEventLoop,
               inbox: asyncio.Queue[tuple[Any, ...]]) -> None:
        _listen(loop, self.conn, inbox)


@dataclass
class WorkerSpec:
    index: int
    count: int
    scenario: Any
    trace: Any
    endpoints: list[dict[str, Any]]  # endpoints.opened() of each endpoint
    t0_ns: int  # the run's start on this worker's clock
    out_dir: str
    parent_pid: int | None  # None: not a child process (a Ray actor)
    #: a Ray worker's driver (``pid``, ``host.hostname``): its part lives as long as that
    owner: dict[str, Any] | None = None


# ---------------------------------------------------------------- worker side


def start_method() -> str:
    """``fork`` where there is one: a worker starts in milliseconds with the trace and every
    module already in memory (``spawn`` costs each worker ~1 s of CPU to import and unpickle
    the trace). The parent forks before its progress bar and collectors start; the child
    takes no part of the parent's event loop (asyncio keys the running loop by pid) and
    drops its signal wake-up pipe."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def worker_main(spec: WorkerSpec, conn: Any, shared: Shared) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; see the module doc
    # ... on SIGTERM too: a forked child would otherwise keep the parent's handler, which
    # cancels through the parent's loop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)  # a forked child must not wake the parent's loop
    run_on(WALL, run_worker(spec, PipeLink(conn), shared))  # the parent's kind of loop


async def run_worker(spec: WorkerSpec, link: Any, shared: Any) -> None:
    """One worker's part of the run: its lanes of each stage the parent sends, until it
    says close. ``link`` carries the messages (``send``, ``listen``); ``shared`` is what
    every worker shares (:class:`Shared`, or its remote counterpart for lanes on other
    hosts, :mod:`agentbench.replay.raylanes`)."""
    from agentbench.replay.endpoints import close_endpoint
    from agentbench.replay.timers import Timers
    from agentbench.replay.treespec import tree_specs
    from agentbench.results.writer import ResultsWriter

    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
    link.listen(loop, inbox)
    sc, trace = spec.scenario, spec.trace
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    _write_part_file(Path(spec.out_dir), spec.owner)
    writer = ResultsWriter(Path(spec.out_dir))
    main = asyncio.current_task()
    cap = sc.timing.idle_cap_s
    timers = Timers(spec.t0_ns, None if cap is None else int(cap * 1_000_000_000))
    timers.busy_elsewhere = lambda: shared.busy_elsewhere(spec.index)
    endpoints: list[Any] = []
    health = Health()
    stop_bg = asyncio.Event()
    bg: list[asyncio.Task[Any]] = []
    status = "crashed"
    error: str | None = None
    frozen = False
    gc_old = (0, 0, 0)
    ctx: Any = None
    try:
        ctx = _worker_context(spec, shared, writer, timers, endpoints)
        if main is not None:  # a disk that refuses the results stops this worker
            writer.on_failure = lambda e: _stop(ctx, main, stop_reason(e))
        source = shared.tree_source(tree_specs(trace), sc.limits.recycle)
        bg.append(asyncio.ensure_future(flush_loop(writer, stop_bg)))
        bg.append(asyncio.ensure_future(health.watch(stop_bg)))
        bg.append(asyncio.ensure_future(_watch(spec, shared, ctx, asyncio.current_task(),
                                               stop_bg)))
        gc_old = quiet_gc()
        frozen = True
        gc.callbacks.append(health.gc_callback)
        link.send(("ready",))
        shard = Shard(spec.index, spec.count)
        while True:
            msg = await inbox.get()
            if msg[0] != "stage":
                break
            _, k, stage, start_ns = msg
            shared.stage_begins()
            await run_stage(ctx, sc, stage, k, source, trace, shard, start_ns)
            link.send(("done", k, ctx.requests_sent, ctx.outcome()))
        status = "completed"
    except asyncio.CancelledError:
        status = "interrupted"
    except Exception as err:  # said in the closed message, then raised as before
        error = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        raise
    finally:
        # the worker is ending: a write that fails from here on (the flush loop's last
        # flush, on a full disk) must not cancel this task again in the middle of its
        # cleanup (a CancelledError traceback from the wait below, seen under load)
        writer.on_failure = None
        if frozen:
            restore_gc(gc_old)
            gc.callbacks.remove(health.gc_callback)
        stop_bg.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*bg, return_exceptions=True), 15)
        for e in endpoints:
            await close_endpoint(e)
        writer.close()
        _publish(spec.index, shared, ctx)
        with contextlib.suppress(OSError, ValueError):
            link.send(("closed", {"worker": spec.index, "pid": os.getpid(), "status": status,
                                  "error": error,
                                  "requests_written": writer.kept,
                                  # CPU of this process (a Ray actor's own threads too)
                                  "cpu_s": round(time.process_time(), 3),
                                  "write_error": (writer.failure.reason
                                                  if writer.failure else None),
                                  "idle_pulled_in_ns": timers.pulled_in_ns,
                                  "client_health": health.summary()}))


def _write_part_file(out_dir: Path, owner: dict[str, Any] | None = None) -> None:
    """Who writes this part folder: a recovery merges it only once this process is gone
    (``agentbench.results.spool.live_part``)."""
    import json
    import socket

    part: dict[str, Any] = {"pid": os.getpid(), "status": "running",
                            "host": {"hostname": socket.gethostname()}}
    if owner is not None:
        part["owner"] = owner
    tmp = out_dir / (PART_FILE + ".tmp")
    tmp.write_text(json.dumps(part))
    os.replace(tmp, out_dir / PART_FILE)


def _worker_context(spec: WorkerSpec, shared: Any, writer: Any, timers: Any,
                    endpoints: list[Any]) -> Any:
    """The worker's run context: its own connections to the endpoints the parent opened
    (appended to ``endpoints``, closed by the caller), prompt caches and router."""
    from agentbench.prompts.layout import BlockCache
    from agentbench.replay.context import RunContext
    from agentbench.replay.endpoints import Router, reconnect
    from agentbench.replay.overflow import classifier
    from agentbench.traces.stats import Potential

    sc, trace = spec.scenario, spec.trace
    vocab = None
    if sc.prompt.tokenizer:
        from agentbench.prompts.vocab import vocab_from_tokenizer

        vocab = vocab_from_tokenizer(sc.prompt.tokenizer)
    caches = {api: BlockCache(api, vocab) for api in {e.api for e in sc.endpoints}}
    for i, cfg in enumerate(sc.endpoints):
        endpoints.append(reconnect(cfg, i, spec.endpoints[i]))
        endpoints[-1].amend = classifier(cfg.context_overflow_phrases)
    flavors = {e.transport.flavor for e in endpoints}
    return RunContext(
        t0_ns=spec.t0_ns, seed=sc.seed, strategy=sc.timing.strategy,
        time_scale=sc.timing.time_scale, api_scale=sc.timing.api_scale,
        shared_prefix_tokens=sc.prompt.shared_prefix_tokens, timers=timers,
        writer=writer, endpoints=endpoints,
        router=Router(sc.routing, endpoints, sc.seed + 7919 * spec.index),
        caches=caches, potential=Potential(trace.sessions),
        flavor=endpoints[0].transport if len(flavors) == 1 else None,
        request_ids=itertools.count(spec.index, spec.count), shared_budget=shared.take,
        on_run_stopped=shared.stop_all)


def _listen(loop: asyncio.AbstractEventLoop, conn: Any,
            inbox: asyncio.Queue[tuple[Any, ...]]) -> None:
    """Messages from the other end of ``conn`` into ``inbox``; ``("eof",)`` when it closed."""
    fd = conn.fileno()

    def readable() -> None:
        try:
            while conn.poll():
                inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            loop.remove_reader(fd)
            inbox.put_nowait(("eof",))

    loop.add_reader(fd, readable)


async def _watch(spec: WorkerSpec, shared: Any, ctx: Any, main: asyncio.Task[Any] | None,
                 stop: asyncio.Event) -> None:
    """Every 10 ms: follow the shared flags (stop: the budget is spent; interrupt: Ctrl-C
    in the parent, or the parent is gone), publish progress (every ``shared.publish_ticks``
    ticks), re-check the idle-gap cap."""
    tick = 0
    every = shared.publish_ticks
    while not stop.is_set():
        if shared.interrupted() or (spec.parent_pid is not None
                                    and os.getppid() != spec.parent_pid):
            if main is not None:
                _stop(ctx, main, shared.interrupt_reason() if shared.interrupted() else None)
            return
        if shared.stopped():
            if shared.budget_spent():
                ctx.stop_for_budget()
            elif not ctx.gives_up():  # not stopped here, or stopped for the budget only
                ctx.stop()
        if tick % every == 0:
            _publish(spec.index, shared, ctx, with_ttft=tick % (25 * every) == 0)
        if not ctx.timers.inflight:
            ctx.timers.check_idle()
        tick += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), _POLL_S)


def _stop(ctx: Any, main: asyncio.Task[Any], why: str | None) -> None:
    """Cancel the worker's ``main`` task, its cancelled rows saying ``why`` (None: the
    generic stop, ``agentbench.replay.sigterm.STOPPED``) unless a reason is already set."""
    if why and ctx.cancel_reason is None:
        ctx.cancel_reason = why
    main.cancel()


def _publish(w: int, shared: Any, ctx: Any, with_ttft: bool = True) -> None:
    if ctx is None:
        return
    wr = ctx.writer
    ttft = 0
    if with_ttft and wr.recent_ttft_ms:
        ttft = int(statistics.median(wr.recent_ttft_ms) * 1000)
    shared.publish(w, [wr.n_requests, wr.n_errors, ctx.trees_done, ctx.sessions_done,
                       ctx.timers.inflight, ttft])
