"""The simulated cluster: N instances behind a router, an optional shared KV tier, and the
async driver that runs each instance's steps in (scaled) real time.

Simulated time is wall time since start times ``speedup``. Each instance plans a step at
``max(end of its previous step, now)``, sleeps until the step's end in wall time, then
commits it; when the event loop falls behind, steps run back to back and the lag shows up
as real latency, never as lost work.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim.admission import first_fit_error
from agentbench.sim.disagg import PD, Transfer
from agentbench.sim.engine import Instance, SimRequest
from agentbench.sim.kvcache import PrefixCache
from agentbench.sim.presets import Preset, get_preset
from agentbench.sim.prompt import U64, PromptHasher
from agentbench.sim.router import Router
from agentbench.sim.slots import SlotInstance
from agentbench.sim.window import context_error, fit_output


class SimRejected(Exception):
    """A request the simulated engine refuses (HTTP 400)."""


class Cluster:
    """Instances, router, shared tier, prompt hasher; ``start()`` runs the step loops."""

    def __init__(self, cfg: SimulatedEndpoint,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.cfg = cfg
        self.preset: Preset = get_preset(cfg.preset,
                                         max_num_batched_tokens=cfg.max_num_batched_tokens,
                                         max_num_seqs=cfg.max_num_seqs)
        self.block_size = cfg.block_size
        self.max_context_tokens: int | None = getattr(cfg, "max_context_tokens", None)
        #: the endpoint's own window follows the OpenAI API (prompt plus output within it);
        #: a preset's, the engine it was fitted to (``context_error``)
        self.window_counts_output = self.max_context_tokens is not None
        self.speedup = cfg.speedup
        self.cache_blocks = cfg.cache_blocks or self.preset.cache_blocks(cfg.block_size)
        tier = cfg.shared_tier
        self.shared = PrefixCache(tier.capacity_blocks, "shared") if tier else None
        load = tier.load_s_per_token if tier is not None else None
        #: prefill and decode pools (None: every instance does both)
        self.pd: PD | None = None
        #: requests between a prefill and a decode instance (their KV on the link) and
        #: their transfers, by the request's id
        self.in_transit: dict[int, tuple[SimRequest, Transfer]] = {}
        self.instances: list[Instance]
        if cfg.disaggregation is not None:
            self.instances = self._pools(cfg, load)
        elif self.preset.scheduler == "slots":  # llama.cpp: the CPU tier is its RAM cache
            if cfg.nvme_tier is not None:
                raise ValueError(f"preset {self.preset.name}: an NVMe tier needs a paged "
                                 "(vLLM-like) preset, not a slots one")
            ram = cfg.cpu_offload_blocks * cfg.block_size or None
            self.instances = [
                SlotInstance(i, self.preset, cfg.block_size, self.cache_blocks, ram_tokens=ram,
                             speedup=cfg.speedup) for i in range(cfg.instances)]
        else:
            nvme = nvme_spec(cfg, self.preset)
            self.instances = [
                Instance(i, self.preset, cfg.block_size, self.cache_blocks,
                         cfg.cpu_offload_blocks, self.shared, load, cfg.speedup, nvme,
                         tier_latency(cfg))
                for i in range(cfg.instances)]
        if self.max_context_tokens is None:  # the presets' windows (P/D: the smaller)
            self.max_context_tokens = min((w for i in self.instances
                                           if (w := i.preset.max_context_tokens)), default=None)
        self.router = Router(cfg.router, cfg.instances, cfg.cache_aware_max_imbalance,
                             cfg.seed)
        self.hasher = PromptHasher(cfg.block_size)
        fit = self.preset.step_fit
        #: simulated seconds before a routed request reaches its instance's queue
        self.request_s = fit.request_s if fit is not None else 0.0
        self.clock = clock
        self._t0 = clock()
        self.created = int(time.time())
        self._next_id = 0
        #: When a list, every finished request is appended to it (benchmarks, tests).
        self.finished_log: list[SimRequest] | None = None
        self._wake: list[asyncio.Event] = []
        self._tasks: list[asyncio.Task[None]] = []
        #: the virtual-time driver (``agentbench.sim.virtual.TimerDriver``), when one runs
        self.driver: Any = None

    def _pools(self, cfg: SimulatedEndpoint, load: float | None) -> list[Instance]:
        """The prefill pool's instances, then the decode pool's, each with its preset."""
        d = cfg.disaggregation
        assert d is not None
        out: list[Instance] = []
        presets = []
        latency = tier_latency(cfg)
        for role, key, ref, n in cfg.pools():
            p = self.preset if key == "preset" else get_preset(
                ref, max_num_batched_tokens=cfg.max_num_batched_tokens,
                max_num_seqs=cfg.max_num_seqs)
            if p.scheduler != "paged":
                raise ValueError(f"preset {p.name}: disaggregation needs a paged (vLLM-like) "
                                 f"preset, not a {p.scheduler} one")
            presets.append(p)
            blocks = cfg.cache_blocks or p.cache_blocks(cfg.block_size)
            nvme = nvme_spec(cfg, p)
            for _ in range(n):
                out.append(Instance(len(out), p, cfg.block_size, blocks,
                                    cfg.cpu_offload_blocks, self.shared, load, cfg.speedup,
                                    nvme, latency))
                out[-1].role = role
        if presets[0].kv_bytes_per_token != presets[1].kv_bytes_per_token:
            raise ValueError("the prefill and decode pools' presets disagree on KV bytes per "
                             "token: both pools serve one model")
        self.preset = presets[0]
        self.pd = PD(d, presets[0], cfg.block_size, cfg.seed, cfg.cache_aware_max_imbalance)
        return out

    # ------------------------------------------------------------ requests

    def now(self) -> float:
        """Simulated seconds since start."""
        return (self.clock() - self._t0) * self.speedup

    def make_request(self, tokens: U64, *, max_tokens: int | None, ignore_eos: bool = False,
                     min_tokens: int = 0, session: str | None = None) -> SimRequest:
        """A request for the prompt ``tokens`` (mixed token ids, see ``prompt.py``).

        Output length: exactly ``max_tokens`` with ``ignore_eos`` or when ``min_tokens``
        reaches it; otherwise a simulated EOS after a length drawn (seeded by the prompt)
        from an exponential distribution with the preset's mean, at least ``min_tokens``,
        at most ``max_tokens``.
        """
        return self.make_hashed(self.hasher.block_hashes(tokens), int(tokens.size),
                                max_tokens=max_tokens, ignore_eos=ignore_eos,
                                min_tokens=min_tokens, session=session)

    def make_hashed(self, hashes: Sequence[int], n: int, *, max_tokens: int | None,
                    ignore_eos: bool = False, min_tokens: int = 0,
                    session: str | None = None) -> SimRequest:
        """``make_request`` for a prompt of ``n`` tokens given by its full-block hashes
        (the in-process transport, which never makes text)."""
        self._next_id += 1
        if ignore_eos and max_tokens is not None:
            out = max_tokens
        else:  # the length it would choose: seeded by the prompt (a Random is ~2 us)
            seed = hashes[-1] if hashes else n
            natural = 1 + int(random.Random(seed).expovariate(
                1.0 / max(1, self.preset.natural_output_tokens)))
            out = max(min_tokens, natural)
            if max_tokens is not None:
                out = min(out, max_tokens)
        out = max(1, out)
        return SimRequest(
            rid=self._next_id, prompt_tokens=n, hashes=hashes, output_tokens=out,
            match_limit=min(len(hashes), (n - 1) // self.block_size),
            finish_as="length" if max_tokens is not None and out == max_tokens else "stop",
            session=session)

    def submit(self, req: SimRequest, at: float | None = None) -> Instance:
        """Route ``req`` and queue it (arriving now, or at simulated time ``at`` on a virtual
        clock); raise ``SimRejected`` when it can never run."""
        return self.place(req, self.route(req, at))

    def route(self, req: SimRequest, at: float | None = None) -> int:
        """``submit``'s first half: the instance ``req`` goes to (its arrival set)."""
        pd = self.pd
        window = self.max_context_tokens
        why = context_error(req, window, self.window_counts_output)
        if why is None and window is not None and not self.window_counts_output:
            fit_output(req, window)
        if why is None and pd is None:
            why = first_fit_error(self.instances[0], req)
        elif why is None:
            req.handoff = True  # what the prefill instance holds: the prompt
            why = first_fit_error(self.instances[0], req, "a prefill instance")
            req.handoff = False
            why = why or first_fit_error(self.instances[-1], req, "a decode instance")
        if why is not None:
            raise SimRejected(why)
        req.arrival = req.sent_at = self.now() if at is None else at
        # routing reads loads and caches only, which a decode run does not change
        index = pd.route(req, self.instances) if pd is not None else \
            self.router.choose(req, self.instances)
        if self.driver is not None:
            self.driver.sync_one(index, req.arrival)  # the arrival changes its course
        return index

    def place(self, req: SimRequest, index: int) -> Instance:
        """``submit``'s second half: queue ``req`` on instance ``index`` (from ``route``)."""
        inst = self.instances[index]
        if self.request_s:  # time outside the steps (a fitted preset's request_s)
            req.arrival += self.request_s
        inst.add(req)
        if self._wake:
            self._wake[index].set()
        if self.driver is not None:
            self.driver.wake(index)
        return inst

    def hand_over(self, inst: Instance, now: float) -> list[tuple[SimRequest, int]]:
        """The requests whose prefill on ``inst`` ended at ``now`` (P/D), each with the
        decode instance it joins when its KV has moved (its ``arrival``); the driver
        calls ``arrive`` then. Routing reads the decode instances' loads and caches, which
        their decode runs do not change (``decoderuns``), so no run is cut for it."""
        handed, inst.handed = inst.handed, []
        pd = self.pd
        assert pd is not None
        out = []
        for r in handed:
            j, t = pd.hand_over(r, now, self.instances)
            self.in_transit[id(r)] = (r, t)
            out.append((r, j))
        return out

    def arrive(self, req: SimRequest, index: int) -> None:
        """A request's KV reached decode instance ``index``: queue it there (unless the
        client went away meanwhile)."""
        got = self.in_transit.pop(id(req), None)
        if got is None:
            return
        assert self.pd is not None
        self.pd.arrived(got[1], self.instances[index])
        self.instances[index].add(req)
        if self._wake:
            self._wake[index].set()
        if self.driver is not None:
            self.driver.wake(index)

    def abort(self, req: SimRequest) -> None:
        """The client went away: free the request's blocks."""
        if self.in_transit.pop(id(req), None) is not None:  # on the link: holds no block
            req.aborted = True
            return
        if 0 <= req.instance < len(self.instances):
            if self.driver is not None:  # the abort changes that instance's course only
                self.driver.sync_one(req.instance, self.now())
            self.instances[req.instance].abort(req)

    def reset_cache(self) -> int:
        """Every instance's idle cached blocks and the shared tier dropped (a stage that
        starts cold, ``load.cold_stages``); the blocks dropped."""
        n = sum(inst.reset_cache() for inst in self.instances)
        if self.shared is not None:
            n += self.shared.evict(len(self.shared))
        return n

    def abort_all(self) -> None:
        """Abort every queued or running request and wake its handler (shutdown)."""
        for inst in self.instances:
            for req in [*inst.waiting, *inst.prefilling, *inst.decoding]:
                if req.finished_at is None and not req.aborted:
                    inst.abort(req)
                    if req.on_progress is not None:
                        req.on_progress(req)
        for req, _ in list(self.in_transit.values()):
            self.abort(req)
            if req.on_progress is not None:
                req.on_progress(req)

    # ------------------------------------------------------------ driver

    async def start(self) -> None:
        """Start one step loop per instance in the running event loop."""
        self._t0 = self.clock()
        self._wake = [asyncio.Event() for _ in self.instances]
        self._tasks = [asyncio.create_task(self._drive(inst, ev), name=f"sim-instance-{i}")
                       for i, (inst, ev) in enumerate(zip(self.instances, self._wake,
                                                          strict=True))]

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []

    async def _drive(self, inst: Instance, wake: asyncio.Event) -> None:
        # A busy instance's steps are back to back in simulated time (a GPU does not idle
        # between steps): when a wake-up comes late (timer granularity, a loaded event loop)
        # the next steps run without sleeping until the simulated clock catches up.
        end_prev = 0.0
        busy = False
        speedup, t0, clock = self.speedup, self._t0, self.clock
        while True:
            if not inst.has_work():
                busy = False
                wake.clear()
                await wake.wait()
            step = plan_next(inst, end_prev if busy else max(end_prev,
                                                              (clock() - t0) * speedup))
            if step is None:
                busy = False
                continue
            end = step[0] + step[1]
            delay = t0 + end / speedup - clock()
            await asyncio.sleep(delay if delay > 0 else 0)
            done = inst.commit(end)
            if done and self.finished_log is not None:
                self.finished_log.extend(done)
            if inst.handed:
                loop = asyncio.get_running_loop()
                for r, j in self.hand_over(inst, end):
                    loop.call_later(max(0.0, t0 + r.arrival / speedup - clock()),
                                    self.arrive, r, j)
            end_prev = end
            busy = True


def tier_latency(cfg: SimulatedEndpoint) -> tuple[float, float]:
    """Seconds per load from the CPU and the shared tier."""
    tier = cfg.shared_tier
    return cfg.cpu_offload_latency_s, tier.latency_s if tier is not None else 0.0


def nvme_spec(cfg: SimulatedEndpoint, preset: Preset) -> tuple[int, float, float] | None:
    """An endpoint's NVMe tier for instances of ``preset``: (blocks, seconds per token
    loaded, seconds per load); None without one."""
    t = cfg.nvme_tier
    if t is None:
        return None
    per_token = t.load_s_per_token
    if per_token is None:
        per_token = preset.model_kv_bytes("nvme_tier.load_s_per_token") \
            / (t.bandwidth_gbps * 1e9 / 8)
    return t.capacity_blocks, per_token, t.latency_s


def plan_next(inst: Instance, start: float) -> tuple[float, float] | None:
    """Plan ``inst``'s next step at ``start`` (later if its only work has not arrived yet);
    return (start, duration), or None when it has nothing it can run. A head request that
    cannot be admitted even on an idle instance is aborted (its handler told)."""
    while inst.has_work():
        dur = inst.plan(start)
        if dur is None and inst.waiting and not inst.running:
            start = max(start, inst.waiting[0].arrival)
            dur = inst.plan(start)
        if dur is not None:
            return start, dur
        if not inst.waiting:
            return None
        req = inst.waiting[0]  # cannot be admitted on an idle instance
        inst.abort(req)
        if req.on_progress is not None:
            req.on_progress(req)
    return None
