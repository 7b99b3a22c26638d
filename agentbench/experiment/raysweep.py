"""The variants of an experiment as Ray tasks (``agentbench run --ray ADDRESS``,
``run_experiment(..., ray=ADDRESS)``; docs/scale.md).

Each variant is one call of :func:`~agentbench.experiment.run.run_variant`, a function of
its arguments alone, run as a Ray task on whichever node has a CPU free; the driver waits
for them, tells the listener as each ends, and compares them as a local run does. Only
variants that run in virtual time (every endpoint ``kind: simulated``, no ``clock: wall``,
no ``server:``) are sent: their run folders are then the same, byte for byte, as when the
variants run one after another here, since nothing in them depends on the host or on what
else runs (``scripts/same_runs.py`` checks it). Variants against real endpoints run from
this host, one after another (side by side they would measure each other), each with its
lanes spread over Ray actors on the cluster's nodes (:mod:`agentbench.replay.raylanes`).

A task runs in the driver's working folder (the scenario file's path made absolute), so it
writes where a local run would; on a node without that folder ``output.dir`` is made
absolute from it. On a cluster of several hosts ``output.dir`` must be on a filesystem
every node mounts, and every node needs agentbench installed
(``pip install 'agentbench[ray]'``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.scenario.endpoints import is_simulated

#: an address that starts a Ray instance in this process (one node, this host's CPUs)
LOCAL = "local"
#: seconds of one ``ray.wait`` for a variant: between two, signal handlers run
_WAIT_S = 0.5


def connect(address: str) -> Any:
    """The ``ray`` module, connected to the cluster at ``address`` (``local``: a Ray started
    here for this experiment; ``auto``: the one ``ray start`` began on this host, or
    ``RAY_ADDRESS``; ``ray://host:10001`` or ``host:6379``: a cluster)."""
    try:
        import ray
    except ImportError:
        raise InputError("Ray is not installed: pip install 'agentbench[ray]'",
                         field="ray") from None
    if ray.is_initialized():  # this process's connection (a notebook's earlier run)
        _same_cluster(ray, address)
    else:
        _check_listening(address)
        import signal
        import threading

        main = threading.current_thread() is threading.main_thread()
        on_term = signal.getsignal(signal.SIGTERM) if main else None
        termed = False
        try:
            # "local", never None: Ray's None joins the cluster RAY_ADDRESS names, or the
            # one `ray start` began on this host
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except SystemExit as e:
            # Ray's own SIGTERM handler while it starts (sys.exit(15)): what it started is
            # stopped (its agents outlived the run), and the signal goes to this
            # process's own handler below (143, not 15)
            if e.code != signal.SIGTERM or on_term is None:
                raise
            termed = True
            with contextlib.suppress(Exception):
                ray.shutdown()
        except (ConnectionError, ValueError, RuntimeError) as e:
            why = " ".join(str(e).split())[:300]
            hint = ("" if address in (LOCAL, "auto") else
                    " (a cluster begun by `ray start` may want token authentication: set "
                    "RAY_AUTH_MODE=token, or use --ray auto on its head node)")
            raise InputError(f"cannot join the Ray cluster at {address!r}: {why}{hint}",
                             field="ray") from None
        finally:
            # ray.init takes SIGTERM (its core worker's crash handler: a stack dump and an
            # abort, exit -6, where agentbench's handler ends the run with 143); the
            # handler this process had is put back
            if on_term is not None:
                signal.signal(signal.SIGTERM, on_term)
        if termed:
            signal.raise_signal(signal.SIGTERM)
    return ray


def _host_port(address: str) -> tuple[str, int]:
    """``host:port`` (or ``ray://host:port``) as a host and a port, or a one-line error."""
    hostport = address.removeprefix("ray://").rsplit("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not (sep and host.strip("[]") and port.isascii() and port.isdigit() and len(port) <= 5
            and 0 < int(port) < 65536):
        raise InputError(f"not a Ray address: {address!r} (host:port, ray://host:port, "
                         "'auto' or 'local')", field="ray")
    return host.strip("[]"), int(port)


def _same_cluster(ray: Any, address: str) -> None:
    """With Ray connected already, an address given is checked all the same: a bad one is
    an error, and one that names another cluster than the connected one too (it used to
    run on the connected cluster, whatever the address said). Ports are compared, not
    hosts: the head node's own address and 127.0.0.1 name one cluster."""
    if address in (LOCAL, "auto"):
        return
    _, port = _host_port(address)
    if address.startswith("ray://"):  # a client connection: the cluster's port is another
        return
    gcs = str(ray.get_runtime_context().gcs_address or "")
    if gcs and gcs.rpartition(":")[2] != str(port):
        raise InputError(f"Ray is connected to the cluster at {gcs} already, not {address!r}: "
                         "ray.shutdown() first to join another", field="ray")


def _check_listening(address: str) -> None:
    """A ``host:port`` (or ``ray://host:port``) address nothing answers at is a one-line
    error at once (Ray itself retries for minutes)."""
    import socket

    if address in (LOCAL, "auto"):
        return
    host, port = _host_port(address)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as e:
        raise InputError(f"cannot join the Ray cluster at {address!r}: nothing answers "
                         f"there ({e.strerror or type(e).__name__})", field="ray") from None


def why_not_remote(sc: Any) -> str | None:
    """Why a variant cannot run as a Ray task (it measures a real server, or runs on the
    wall clock), or None when it can."""
    if getattr(sc, "server", None) is not None:
        return "it starts a server (server:)"
    if not all(is_simulated(e) for e in sc.endpoints):
        return "it measures a real endpoint"
    if sc.clock == "wall":
        return "it runs on the wall clock (clock: wall)"
    return None


def portable(sc: Any, cwd: str) -> Any:
    """``sc`` with ``output.dir`` absolute, from the driver's working folder ``cwd`` (a
    task on a node without that folder writes where the driver would)."""
    out = sc.model_copy(deep=True)
    out.output.dir = str(Path(cwd) / sc.output.dir)
    return out


def _task(sc: Any, scenario_path: str | None, cwd: str) -> Any:
    """One variant, in a Ray worker: trace, replay, summary, verdicts. In the driver's
    working folder when this node has it (the run folder and run.json are then those of
    a local run, a relative ``output.dir`` included), else with ``output.dir`` made
    absolute."""
    import os

    import ray

    from agentbench.experiment.run import run_variant

    if Path(cwd).is_dir():
        os.chdir(cwd)
    else:
        sc = portable(sc, cwd)
    run = run_variant(sc, scenario_path=None if scenario_path is None else Path(scenario_path))
    run.node = ray.get_runtime_context().get_node_id()
    return run


def wait_one(ray: Any, pending: list[Any]) -> tuple[list[Any], list[Any]]:
    """``ray.wait`` for one of ``pending``, ``_WAIT_S`` at a time: a wait without a timeout
    runs no signal handler until a task ends (Ctrl-C or SIGTERM waited for the next variant
    to finish). A handler's exception raised inside Ray's wait (agentbench's SIGTERM:
    ``Terminated``) comes out of Ray as a ``SystemError``; it is raised as itself, so
    SIGTERM ends the run as it does elsewhere."""
    while True:
        done, left = _wait(ray, pending, 1)
        if done:
            return done, left


def _wait(ray: Any, refs: list[Any], n: int) -> tuple[list[Any], list[Any]]:
    """One ``ray.wait`` of ``_WAIT_S`` for ``n`` of ``refs``, a signal handler's exception
    raised as itself (see ``wait_one``)."""
    try:
        done, left = ray.wait(refs, num_returns=n, timeout=_WAIT_S)
    except SystemError as e:
        cause = e.__cause__
        if cause is not None and not isinstance(cause, Exception):
            raise cause from None
        raise
    return list(done), list(left)


def run_remote(variants: list[Any], address: str, scenario_path: Path | None,
               tell: Any, of: int, per_node: int = 1, progress: bool | None = False,
               traces: dict[str, Any] | None = None) -> list[Any]:
    """Every variant on the Ray cluster at ``address``; their runs in the variants' order.
    Variants in virtual time run side by side as Ray tasks; each variant that measures
    an endpoint runs on this host, one after another first, its lanes on Ray actors
    (``per_node`` on each node: :mod:`agentbench.replay.raylanes`). ``tell`` hears
    ``variant_started``, ``run_started`` (not for a Ray task's run, known once it has
    ended) and ``variant_done`` (``of``: the scenario's variant count)."""
    from agentbench.experiment.run import run_variant
    from agentbench.replay.raylanes import check_per_node, ray_lanes

    check_per_node(per_node)
    ray = connect(address)
    executor = ray_lanes(ray, per_node)
    runs: list[Any] = [None] * len(variants)
    remote = [i for i, sc in enumerate(variants) if why_not_remote(sc) is None]
    for i, sc in enumerate(variants):
        if i in remote:
            continue
        tell.variant_started(sc, of)
        runs[i] = run_variant(sc, scenario_path=scenario_path, listener=tell,
                              progress=progress, executor=executor, traces=traces)
    for i in remote:
        tell.variant_started(variants[i], of)
    task = ray.remote(num_cpus=1, max_retries=0)(_task)
    path = None if scenario_path is None else str(Path(scenario_path).resolve())
    cwd = str(Path.cwd())
    refs = [task.remote(variants[i], path, cwd) for i in remote]
    index = {ref: i for i, ref in zip(remote, refs, strict=True)}
    pending = list(refs)
    try:
        while pending:
            done, pending = wait_one(ray, pending)
            try:
                run = ray.get(done[0])
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                raise (cause if isinstance(cause, Exception) else e) from None
            runs[index[done[0]]] = run
            tell.variant_done(run)  # its folder too: a task's run is known once it has ended
    except BaseException:  # Ctrl-C, SIGTERM, a variant's error: the others stop as a run
        stop_tasks(ray, pending)
        raise
    return runs


#: seconds the variants still running are given to write their files when a sweep stops
STOP_S = 30.0


def stop_tasks(ray: Any, pending: list[Any], within_s: float = STOP_S) -> None:
    """Stop the variants of ``pending`` as Ctrl-C stops a local run: Ray's cancel without
    force raises KeyboardInterrupt in a running task, whose run then writes its rows and
    run.json as ``interrupted`` (a forced cancel killed the worker: the folder stayed
    ``running``, and readers took it for a killed run); one not started yet never starts.
    Waits up to ``within_s`` for them, then forces what is left. A second signal in the
    wait forces the rest at once. Ray's own errors here (a cluster lost, the reason the
    sweep stops) end the stop quietly: the caller raises what stopped the sweep, not
    them."""
    import time

    left = list(pending)
    try:
        for ref in pending:
            ray.cancel(ref, force=False)
        end = time.monotonic() + within_s
        while left and time.monotonic() < end:
            left = _wait(ray, left, len(left))[1]
    except Exception:
        pass
    finally:
        for ref in left:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
