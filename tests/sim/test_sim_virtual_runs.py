"""``run_virtual`` (decode runs, held blocks counted as pins come and go) gives exactly the
results of stepping every instance one step at a time, as it did before: the same
per-request admissions, hits, first tokens and finishes, in the same completion order, and
the same step counts, busy time and evictions. Checked against a copy of the old
step-at-a-time driver and against checksums recorded with the old engine."""

from __future__ import annotations

import hashlib
import heapq
import math
import random
from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import pytest

from agentbench.scenario.model import SharedTier, SimulatedEndpoint
from agentbench.sim import decoderuns, native
from agentbench.sim.cluster import Cluster
from agentbench.sim.engine import Instance, SimRequest
from agentbench.sim.presets import Preset, get_preset
from agentbench.sim.virtual import run_virtual

#: a test that patches the engine to watch it: under the opt-in compiled engine
#: (``AGENTBENCH_NATIVE``) a compiled call does not see a patch, so it cannot run there
watches_engine = pytest.mark.skipif(
    native.compiled(), reason="patches the engine to watch it; a compiled engine's calls "
    "do not see a patch (AGENTBENCH_NATIVE)")


def step_by_step(cluster: Cluster, schedule: Iterable[tuple[float, SimRequest]],
                 start: float = 0.0) -> list[SimRequest]:
    """The old ``run_virtual``: every step planned and committed on its own."""
    arrivals = sorted(schedule, key=lambda x: x[0])
    steps: list[tuple[float, int]] = []
    end_prev = [start] * len(cluster.instances)
    in_flight = [False] * len(cluster.instances)
    done: list[SimRequest] = []

    def begin(inst: Instance, t: float) -> None:
        at = max(t, end_prev[inst.index])
        dur = inst.plan(at)
        if dur is None and inst.waiting and not inst.running:
            at = max(at, inst.waiting[0].arrival)
            dur = inst.plan(at)
        if dur is not None:
            heapq.heappush(steps, (at + dur, inst.index))
            in_flight[inst.index] = True

    i = 0
    while i < len(arrivals) or steps:
        t_arr = arrivals[i][0] if i < len(arrivals) else math.inf
        if steps and steps[0][0] < t_arr:
            end, idx = steps[0]
            inst = cluster.instances[idx]
            done.extend(inst.commit(end))
            end_prev[idx] = end
            dur = inst.plan(end) if inst.has_work() else None
            if dur is not None:
                heapq.heapreplace(steps, (end + dur, idx))
                continue
            heapq.heappop(steps)
            in_flight[idx] = False
            if inst.has_work():
                begin(inst, end)
        else:
            t, req = arrivals[i]
            i += 1
            inst = cluster.submit(req, at=t)
            if not in_flight[inst.index]:
                begin(inst, t)
    return done


#: agentic sessions (growing prefixes, think times) like benchmarks/sim_bench.py's, smaller
WORKLOADS: dict[str, dict[str, object]] = {
    "agentic": dict(sessions=24, turns=6, out_tokens=250, first=(2000, 10000),
                    growth=(300, 1500), think=(1.0, 5.0)),
    "long": dict(sessions=6, turns=6, out_tokens=250, first=(10000, 30000),
                 growth=(300, 3000), think=(5.0, 30.0)),
    "thrash": dict(sessions=30, turns=5, out_tokens=60, first=(10000, 30000),
                   growth=(300, 3000), think=(5.0, 30.0), cache_blocks=3000),
    "thrash-cpu": dict(sessions=20, turns=5, out_tokens=40, first=(3000, 9000),
                       growth=(300, 3000), think=(0.5, 3.0), cache_blocks=1500,
                       cpu_offload_blocks=2000, router="cache_aware", max_num_seqs=6),
    "shared-tier": dict(sessions=16, turns=5, out_tokens=30, first=(2000, 6000),
                        growth=(100, 2000), think=(0.0, 2.0), cache_blocks=1200,
                        router="least_loaded", max_num_seqs=4,
                        shared_tier=SharedTier(capacity_blocks=3000,
                                               load_s_per_token=1e-6)),
}

#: checksums of ``_results`` recorded with the engine as it was before decode runs in
#: ``run_virtual`` and the incremental held-block count
CHECKSUMS = {
    "agentic": "1267295e1a32bf30",
    "long": "c666f26c6e6b77f2",
    "thrash": "db2f7cb36811bfd8",
    "thrash-cpu": "69a0522d0e8ed79c",
    "shared-tier": "e28cfde1334855bd",
}


def _build(sessions: int, turns: int, out_tokens: int, first: tuple[int, int],
           growth: tuple[int, int], think: tuple[float, float], seed: int = 0,
           **cfg: object) -> tuple[Cluster, list[tuple[float, SimRequest]]]:
    endpoint = SimulatedEndpoint.model_validate({
        "kind": "simulated", "preset": "h200-llama3-70b", "instances": 4,
        "router": "session_affinity", **cfg})
    cl = Cluster(endpoint)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    sched = []
    for s in range(sessions):
        n = rng.randint(*first)
        context = nrng.integers(0, 100_000, size=n + turns * growth[1])
        t = rng.uniform(0, 30)
        for _ in range(turns):
            toks = cl.hasher.id_tokens(context[:n])
            sched.append((t, cl.make_request(toks, max_tokens=out_tokens, ignore_eos=True,
                                             session=f"s{s}")))
            n += rng.randint(*growth)
            t += rng.uniform(*think)
    return cl, sched


def _results(cl: Cluster, done: list[SimRequest]) -> str:
    rows = [(r.rid, r.instance, r.cached_tokens, r.gpu_hit_tokens, r.cpu_hit_tokens,
             r.admitted_at, r.first_token_at, r.finished_at) for r in done]
    stats = [(i.stats.steps, i.stats.busy_s, i.gpu.evictions, i.stats.generation_tokens)
             for i in cl.instances]
    return repr((rows, stats))


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_run_virtual_matches_stepping_one_step_at_a_time(name: str) -> None:
    cl, sched = _build(**WORKLOADS[name])  # type: ignore[arg-type]
    new = _results(cl, run_virtual(cl, sched))
    cl, sched = _build(**WORKLOADS[name])  # type: ignore[arg-type]
    old = _results(cl, step_by_step(cl, sched))
    assert new == old
    assert hashlib.sha256(new.encode()).hexdigest()[:16] == CHECKSUMS[name]


def _trie_size(paths: list[list[int]]) -> int:
    """The old engine's count of blocks held by running requests: distinct prefixes among
    their cached paths (total length less common prefixes of sorted neighbours)."""
    paths.sort()
    total = sum(map(len, paths))
    for a, b in zip(paths, paths[1:], strict=False):
        lo = 0
        while lo < min(len(a), len(b)) and a[lo] == b[lo]:
            lo += 1
        total -= lo
    return total


@watches_engine
@pytest.mark.parametrize("name", ["thrash", "thrash-cpu", "shared-tier"])
def test_held_blocks_counted_as_pins_come_and_go(name: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu.held`` (and so admission and ``kv_usage``) equals what the old engine computed
    from the running requests' hash lists, after every step."""
    checked = 0
    commit = Instance.commit

    def checking(inst: Instance, now: float) -> list[SimRequest]:
        nonlocal checked
        out = commit(inst, now)
        gpu = inst.gpu
        paths = [r.hashes[:gpu.depth_of(r.pinned) + 1] for r in inst.decoding + inst.prefilling
                 if r.pinned is not None and not r.aborted]
        held = _trie_size(paths)
        assert gpu.held == held
        assert inst.kv_usage() == min(1.0, (held + gpu.reserved) / gpu.capacity)
        checked += 1
        return out

    monkeypatch.setattr(Instance, "commit", checking)
    cl, sched = _build(**WORKLOADS[name])  # type: ignore[arg-type]
    run_virtual(cl, sched)
    assert checked > 100 and sum(i.gpu.evictions for i in cl.instances) > 0


#: presets, and one whose weight and KV bytes are not integers (no exact-integer shortcut)
PRESETS = [get_preset("h200-llama3-70b"), get_preset("h100-llama3-8b"), get_preset("instant"),
           replace(get_preset("h200-llama3-70b"), weight_bytes=7.06e10 + 0.37,
                   kv_bytes_per_token=163840.5)]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
@pytest.mark.parametrize("b", [1, 3, 64, 256])
def test_decode_run_steps_are_plans_steps(preset: Preset, b: int) -> None:
    """A decode run's step ends and busy time, computed with numpy or in Python, equal
    planning and committing those steps one at a time (memory- and compute-bound)."""
    # b = 256 from a context of 300,000: compute bound at first, memory bound by the end
    for n, ctx in ((5, 1000), (decoderuns.NUMPY_STEPS + 7, 20_000), (300, 300_000),
                   (300, 3_000_000)):
        inst = Instance(0, replace(preset, max_num_seqs=512), 16, 1000)
        reqs = [SimRequest(rid=i, prompt_tokens=ctx // b + i, hashes=[], output_tokens=n + 2)
                for i in range(b)]
        for r in reqs:
            r.generated = 1
        inst.decoding = list(reqs)
        inst._decode_ctx = sum(r.prompt_tokens + 1 for r in reqs)
        inst.stats.busy_s = 1.25
        run = decoderuns.decode_run(inst, 7.5, n)
        assert run is not None and run.steps == n and not run.finishes
        ends, busy = [7.5], [1.25]
        for _ in range(n):  # plan() and commit() one step at a time
            dur = inst.plan(ends[-1])
            assert dur is not None
            ends.append(ends[-1] + dur)
            busy.append(inst.stats.busy_s)
            inst.commit(ends[-1])
        assert [float(t) for t in run.times] == ends and run.end == ends[-1]
        assert [float(x) for x in run.busy] == busy


@watches_engine
@pytest.mark.parametrize("name", ["agentic", "thrash", "shared-tier"])
def test_token_stamps_kept_by_the_engine_are_those_of_each_step(name: str) -> None:
    """A virtual-time driver's requests that keep token stamps (``token_ns``) get one
    stamp per token, at the end (in ns) of the step that made it, decode runs and their
    cuts included: the same stamps as stepping one step at a time and stamping each token
    as its request is told of it. Their ``on_progress`` is called once, when they finish."""
    import asyncio
    from array import array

    from agentbench.replay.clock import run_on
    from agentbench.sim.virtual import TimerDriver

    # arrivals on whole seconds: the same instant on the loop's ns clock and as a float
    cl, sched = _build(**WORKLOADS[name])  # type: ignore[arg-type]
    sched = [(float(round(t)), r) for t, r in sched]
    want: dict[int, list[tuple[int, int]]] = {}

    def stamp(r: SimRequest) -> None:
        got = want.setdefault(r.rid, [])
        seen = sum(n for _, n in got)
        if r.generated > seen:
            got.append((round(clock[0] * 1e9), r.generated - seen))

    clock = [0.0]
    for inst in cl.instances:  # every commit's time, for the reference's stamps
        inst.commit = (lambda f: lambda now, stamp=None: (clock.__setitem__(0, now),
                                                           f(now))[1])(inst.commit)
    for _, r in sched:
        r.on_progress = stamp
    ref = step_by_step(cl, sched)

    cl, sched = _build(**WORKLOADS[name])  # type: ignore[arg-type]
    sched = [(float(round(t)), r) for t, r in sched]
    told: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        cl.clock, cl._t0 = loop.time, loop.time()
        drv = TimerDriver(cl, loop, clock_ns=loop.now_ns)  # type: ignore[attr-defined]
        drv.start()
        for t, r in sched:
            r.token_ns = array("q")
            r.on_progress = lambda r: told.append(r.rid)
            loop.call_at(t, cl.submit, r)
        await asyncio.sleep(max(t for t, _ in sched) + 10_000)
        drv.close()

    run_on("virtual", main())
    got = {r.rid: [(t, 1) for t in r.token_ns] for _, r in sched}
    assert got == want
    assert sorted(told) == sorted(r.rid for r in ref)  # once each, when it finished
    assert all(r.finished_at is not None for _, r in sched)
    assert sum(len(v) for v in got.values()) > 1000
