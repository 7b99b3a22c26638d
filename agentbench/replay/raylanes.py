"""Lanes on Ray actors over several hosts: the executor of a run that measures a real
endpoint under ``agentbench run --ray ADDRESS`` (docs/scale.md, "Load from several
hosts"), the driver's side (what runs on the nodes: :mod:`agentbench.replay.raynode`).
It is ``--workers`` (:mod:`agentbench.replay.workers`) with Ray in place of one
host's processes and shared memory:

- placement: ``workers_per_node`` actors on every live node with a CPU (never more than
  the node's CPUs, nor in all than the load's lanes), each pinned to its node; worker ``w``
  of ``W`` runs lanes ``w, w + W, ...``, so a lane and each of its trees stay on one actor;
- one tree sequence, one request budget: a coordinator actor on the driver's node holds the
  sequence's state, the stage's budget and the flags. A worker draws a tree in one round
  trip to it, and leases requests of the budget (``max_requests``) a share at a time
  (every leased request is sent, so the stage sends its budget exactly); progress and
  flags travel in the background every 100 ms;
- one time base: before the run, each worker's clock offset to the driver is measured,
  best of ``CLOCK_TRIES`` round trips (``offset = remote - midpoint``, at most half the
  round trip wrong); the worker stamps ``perf_counter_ns() - (t0 + offset)``, so its rows
  land on the driver's time base. Offsets and round trips go to run.json ``ray``;
- records: each worker journals its rows under ``<run>/workers/w<k>/`` (so the run folder
  must be on a filesystem every node mounts; checked before the run), merged raw at the
  end as ``--workers`` does, so every percentile is exact;
- a lost node: its workers' finished rows are in their journals (recovered at the merge),
  the requests they had in flight (as last published) are counted as cut, and run.json
  ``ray.lost`` names the worker, node and when; the others go on. Every worker lost stops
  the run with a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.replay.context import merged_outcomes
from agentbench.replay.raynode import Coordinator, LoadWorker
from agentbench.replay.shared import _STATS, Counters
from agentbench.replay.stages import max_shards
from agentbench.replay.workers import WorkerSpec
from agentbench.results.spool import WORKERS_DIR, merge_parts
from agentbench.scenario.secrets import env_read

#: round trips per worker to measure its clock offset (the one with the least round trip
#: counts)
CLOCK_TRIES = 9
_POLL_S = 0.2
#: seconds Ray has to start every load worker; one that it cannot place by then (its
#: node's CPUs held by other work) is a one-line error naming the node, not a wait forever
PLACE_S = 60.0
_LOOPBACK = ("127.", "localhost", "[::1]", "::1", "0.0.0.0")


def plan_nodes(nodes: list[dict[str, Any]], per_node: int, lanes: int | None) -> list[str]:
    """The node of each worker: ``per_node`` on every live node with a CPU (capped by its
    CPUs), taken node by node in turn, at most ``lanes`` in all (``stages.max_shards``)."""
    live = [(n["NodeID"], int(n.get("Resources", {}).get("CPU", 0))) for n in nodes
            if n.get("Alive")]
    live = [(node, min(per_node, cpus)) for node, cpus in live if cpus >= 1]
    out: list[str] = []
    for k in range(max((n for _, n in live), default=0)):
        out += [node for node, n in live if k < n]
    return out if lanes is None else out[:max(1, lanes)]


class RayLanes:
    """The executor (:class:`agentbench.replay.executor.Executor`) of lanes on Ray actors;
    ``ray``: the connected module; ``run``: the run (scenario, trace, endpoints, t0, folder,
    run.json ``info``)."""

    def __init__(self, ray: Any, per_node: int, run: Any) -> None:
        from agentbench.replay.endpoints import opened

        self.ray, self.per_node = ray, per_node
        self.scenario, self.trace, self.t0, self.run_dir = \
            run.scenario, run.trace, run.t0, Path(run.run_dir).resolve()
        self.n_trees = len(run.specs)
        self.info = run.info
        self.found = [opened(e) for e in run.endpoints]
        self.workers = 0
        self.actors: list[Any] = []
        self.places: list[dict[str, Any]] = []
        self.specs: list[WorkerSpec] = []
        self.inboxes: list[asyncio.Queue[tuple[Any, ...]]] = []
        self.lost: list[dict[str, Any]] = []
        self.closed: list[dict[str, Any]] = []
        self.outcomes: list[dict[str, Any]] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.counters_now = Counters([], 0)  # the coordinator's, as last fetched

    # ------------------------------------------------------------------ start

    async def start(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray, sc = self.ray, self.scenario
        cluster = ray.nodes()
        nodes = plan_nodes(cluster, self.per_node, max_shards(sc.load))
        if not nodes:
            raise InputError("the Ray cluster has no live node with a CPU", field="ray")
        self.workers = n = len(nodes)
        self.counters_now = Counters([0] * (n * _STATS), n)
        here = ray.get_runtime_context().get_node_id()
        self.coord = ray.remote(Coordinator).options(
            # on the driver's own node (it goes only with the driver): a node lost is never
            # the one holding the sequence and the budget; soft only when the driver is
            # not a node of the cluster (a client)
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                here, soft=here not in {x["NodeID"] for x in cluster if x.get("Alive")}),
        ).remote(self.n_trees, sc.limits.recycle, n)
        worker = ray.remote(LoadWorker)
        self.actors = [worker.options(
            num_cpus=1, max_concurrency=4, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
            for node in nodes]
        names = {x["NodeID"]: f"{x.get('NodeManagerHostname') or '?'} ({x['NodeID'][:12]})"
                 for x in cluster}
        self.places = await self._placed([names.get(node, node[:12]) for node in nodes])
        self._check_reach(cluster, here)
        for w, (a, place) in enumerate(zip(self.actors, self.places, strict=True)):
            if not await a.sees.remote(str(self.run_dir)):
                raise InputError(f"Ray node {place['hostname']} ({place['node'][:12]}) does not "
                                 f"see the run folder {self.run_dir}: output.dir must be on a "
                                 "filesystem every node mounts", field="ray")
            place.update(worker=w, **await self._offset(a))
        out = self.run_dir / WORKERS_DIR
        self.specs = [WorkerSpec(w, n, sc, self.trace, self.found,
                                 self.t0 + self.places[w]["clock_offset_ns"],
                                 str(out / f"w{w}"), None,
                                 {"pid": os.getpid(), "host": {"hostname": socket.gethostname()}})
                      for w in range(n)]
        self.info["ray"] = {"workers_per_node": self.per_node,
                            "coordinator_node": await self.coord.node.remote(),
                            "nodes": len(set(nodes)),
                            "clock_tries": CLOCK_TRIES, "workers": self.places, "lost": self.lost}
        # the variables the endpoints read (API key, ${NAME} markers) as set here: a
        # worker's node has the environment of its `ray start`, which may lack them (the
        # key was left out of every request, each one an HTTP 401). An argument of the
        # call, never the actor's runtime env (which Ray shows to the cluster's users)
        env = env_read(sc.endpoints)
        self.runs = [a.run.remote(spec, self.coord, env)
                     for a, spec in zip(self.actors, self.specs, strict=True)]
        self.inboxes = [asyncio.Queue() for _ in range(n)]
        self.tasks = [asyncio.ensure_future(self._follow(w)) for w in range(n)]
        self.tasks.append(asyncio.ensure_future(self._refresh()))
        await self._all("ready")

    async def _placed(self, nodes: list[str]) -> list[dict[str, Any]]:
        """Each worker's place (``LoadWorker.where``) once all have started; workers Ray has
        not started within ``PLACE_S`` are one error naming their nodes (``nodes``: each
        worker's, as the error names it)."""
        futs = [asyncio.ensure_future(a.where.remote()) for a in self.actors]
        _, pending = await asyncio.wait(futs, timeout=PLACE_S)
        if pending:
            for f in pending:
                f.cancel()
            late = sorted({nodes[i] for i, f in enumerate(futs) if f in pending})
            raise InputError(
                f"Ray did not start a load worker within {PLACE_S:g} s on node "
                f"{', '.join(late)}: each worker takes a free CPU there, and other work may "
                "hold them; free one, or ask fewer with --workers-per-node", field="ray")
        return [f.result() for f in futs]

    def _check_reach(self, nodes: list[dict[str, Any]], here: str) -> None:
        """A loopback endpoint with workers on another host is refused in one line (they
        would measure connection errors)."""
        ip = {n["NodeID"]: n.get("NodeManagerAddress") for n in nodes}
        others = {p["hostname"] for p in self.places if ip.get(p["node"]) != ip.get(here)}
        for e in self.found:
            url = str(e.get("base_url") or e.get("url") or "")
            host = url.split("://", 1)[-1]
            if others and host.startswith(_LOOPBACK):
                raise InputError(f"endpoint {url} is on this host's loopback, which Ray "
                                 f"workers on {', '.join(sorted(others))} cannot reach: give "
                                 "an address every node can reach", field="ray")

    async def _offset(self, actor: Any) -> dict[str, int]:
        """The actor's ``perf_counter_ns`` minus the driver's, from the round trip of
        ``CLOCK_TRIES`` that took least: at most half that round trip wrong."""
        best: tuple[int, int] | None = None
        for _ in range(CLOCK_TRIES):
            t1 = time.perf_counter_ns()
            remote = await actor.clock.remote()
            t2 = time.perf_counter_ns()
            if best is None or t2 - t1 < best[0]:
                best = (t2 - t1, remote - (t1 + t2) // 2)
        assert best is not None
        return {"clock_offset_ns": best[1], "clock_rtt_ns": best[0]}

    # ------------------------------------------------------------ messages

    async def _follow(self, w: int) -> None:
        """Worker ``w``'s messages into its inbox; ``("eof",)`` once its actor is gone."""
        while True:
            try:
                msgs = await self.actors[w].poll.remote(_POLL_S)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the actor (or its node) is gone
                self._lose(w, e)
                self.inboxes[w].put_nowait(("eof",))
                return
            for m in msgs:
                self.inboxes[w].put_nowait(m)
                if m[0] == "closed":
                    return

    def _lose(self, w: int, err: BaseException, closed: bool = False) -> None:
        """Worker ``w`` is gone: its actor died (or, ``closed``, it stopped by itself)."""
        if any(x["worker"] == w for x in self.lost) or \
                (not closed and any(c.get("worker") == w for c in self.closed)):
            return
        place = self.places[w]
        cut = self.counters_now.stats[w * _STATS + 4]
        self.lost.append({"worker": w, "node": place["node"], "hostname": place["hostname"],
                          "at_s": round((time.perf_counter_ns() - self.t0) / 1e9, 3),
                          "requests_cut": int(cut),
                          "error": " ".join(str(err).split())[:300]})

    def _live(self) -> list[int]:
        gone = {x["worker"] for x in self.lost}
        return [w for w in range(self.workers) if w not in gone]

    async def _all(self, kind: str) -> list[tuple[Any, ...]]:
        out = []
        for w in self._live():
            msg = await self.inboxes[w].get()
            if msg[0] == "closed":
                self.closed.append(msg[1])
                if kind != "closed":  # it stopped by itself: lost, the others go on
                    self._lose(w, RuntimeError(f"worker stopped ({msg[1].get('status')}): "
                                               f"{msg[1].get('error')}"), closed=True)
                    continue
            if msg[0] == "eof":
                continue
            if msg[0] != kind:
                raise RuntimeError(f"Ray worker {w} stopped ({msg[0]}) while waiting for "
                                   f"{kind!r}")
            out.append(msg)
        return out

    async def _refresh(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                self.counters_now.stats = await self.coord.snapshot.remote()
            await asyncio.sleep(0.1)

    # ------------------------------------------------------------ executor

    def counters(self) -> Any:
        from agentbench.replay.fleet import FleetView

        return FleetView(self.counters_now)

    async def run_stage(self, k: int, stage: Any, start_ns: int) -> int | None:
        await self.coord.new_stage.remote()
        for w in self._live():
            self.actors[w].post.remote(("stage", k, stage, start_ns))
        done = await self._all("done")
        self.outcomes = [m[3] for m in done]
        out = await self.coord.tree.remote("profile_start_ns")
        return None if out is None else int(out)

    def unreachable(self) -> dict[str, Any]:
        out = merged_outcomes(self.outcomes)
        if self.workers and not self._live():
            out["stopped_reason"] = (f"every Ray load worker was lost ({len(self.lost)}; "
                                     "run.json ray.lost)")
        return out

    async def close(self, interrupt: bool, why: str | None = None) -> None:
        if not self.actors:
            return
        if len(self.inboxes) < self.workers:  # stopped while starting: nothing ran yet
            for a in [*self.actors, getattr(self, "coord", None)]:
                with contextlib.suppress(Exception):
                    self.ray.kill(a)
            self.actors = []
            return
        if interrupt:
            with contextlib.suppress(Exception):
                await self.coord.raise_interrupt.remote(why)
        for w in self._live():
            with contextlib.suppress(Exception):
                self.actors[w].post.remote(("close",))
        t_end = time.monotonic() + 60
        for w in self._live():
            while not any(c.get("worker") == w for c in self.closed):
                try:
                    msg = await asyncio.wait_for(self.inboxes[w].get(),
                                                 max(0.1, t_end - time.monotonic()))
                except TimeoutError:
                    break
                if msg[0] == "closed":
                    self.closed.append(msg[1])
                if msg[0] in ("closed", "eof"):
                    break
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*self.runs, return_exceptions=True), 10)
        for t in self.tasks:
            t.cancel()
        for a in [*self.actors, self.coord]:
            with contextlib.suppress(Exception):
                self.ray.kill(a)

    def merge(self, run_dir: Path) -> int:
        return merge_parts(run_dir, [Path(s.out_dir) for s in self.specs])

    def finish(self, run_dir: Path, info: dict[str, Any], writer: Any) -> None:
        from agentbench.replay.executor import finish_workers

        finish_workers(self, run_dir, info, writer)


def ray_lanes(ray: Any, per_node: int = 1) -> Any:
    """An executor factory (``run_scenario(..., executor=...)``) for lanes on the Ray
    cluster ``ray`` is connected to, ``per_node`` workers on each node."""
    check_per_node(per_node)
    return lambda _n, run: RayLanes(ray, per_node, run)


def check_per_node(per_node: int) -> None:
    """``--workers-per-node`` must be at least 1 (checked before joining a cluster)."""
    if per_node < 1:
        raise InputError(f"workers per node must be at least 1, not {per_node}",
                         field="--workers-per-node")
