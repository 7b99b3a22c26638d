"""The embedded simulator in the replay's own process, on the virtual clock: no HTTP, no
text, no sleeping. A request is submitted to the cluster model at the current simulated
time; the engine's steps run as timers of the same event loop; every token the engine
emits is stamped at its step's end. The record gets the fields an HTTP stream of the
simulator would give (one token per event, ``usage`` with cached tokens), in simulated
nanoseconds.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentbench.prompts.layout import MESSAGE_APIS, chat_overhead
from agentbench.prompts.segments import SegmentPrompt, SimPrompt
from agentbench.results import schema as records
from agentbench.results.samples import SampleBlock, SeriesLayout
from agentbench.results.schema import RequestRecord
from agentbench.sim.cluster import Cluster, SimRejected
from agentbench.sim.engine import SimRequest
from agentbench.sim.metrics import SampleRows
from agentbench.sim.timeline import breakdown
from agentbench.sim.virtual import TimerDriver
from agentbench.traces.model import Turn
from agentbench.transport.base import Collector, Flavor
from agentbench.transport.sse import StreamResult

#: a simulated token event's tokens: one (the engine stamps one token a step)
_ONE = array("i", [1])


class SimTransport:
    """One simulated endpoint: its cluster (started on the running virtual loop), prompt
    builders and ``send``."""

    def __init__(self, cfg: Any, now_ns: Callable[[], int]) -> None:
        # in virtual time the simulator runs at simulated speed: ``speedup`` is a wall-clock
        # setting (how much faster than real time the HTTP simulator answers)
        loop = asyncio.get_running_loop()
        self.cfg = cfg.model_copy(update={"speedup": 1.0})
        self.cluster = Cluster(self.cfg, clock=loop.time)
        self.driver = TimerDriver(self.cluster, loop, clock_ns=now_ns)
        self._loop = loop  # ``asyncio.get_running_loop`` asks the OS for the process id
        self.now_ns = now_ns
        self.block_size = self.cfg.block_size
        self.chat = self.cfg.api in MESSAGE_APIS  # a text prompt in one message
        self.ignore_eos = True
        self.label = cfg.name or "sim"
        self.api = cfg.api
        self.overhead = chat_overhead() if self.chat else 0
        self.notes = ["in-process simulator on the virtual clock"]

    @property
    def flavor(self) -> Flavor:
        return (self.api, self.overhead, int(self.block_size))

    async def start(self) -> None:
        self.driver.start()

    async def close(self) -> None:
        self.cluster.abort_all()
        self.driver.close()

    def prompt_builder(self, caches: Mapping[str, Any], salt: int, session_id: str,
                       shared_prefix: int, turns: Sequence[Turn] = ()) -> SegmentPrompt:
        """Prompts as prefix-chained block hashes (no text), each lineage of ``turns``
        hashed once."""
        return SegmentPrompt(salt, session_id, self.overhead, shared_prefix, self.chat,
                             int(self.block_size), turns)

    def collector(self) -> Collector:
        """The server-metrics rows of each sample, read from the cluster directly (its
        series laid out once: ``SampleRows``)."""
        plan = SampleRows(self.cfg.model, self.cluster.instances)
        layout = SeriesLayout(plan.names, plan.labels)
        label, driver, cluster = self.label, self.driver, self.cluster

        async def collect(t: int) -> SampleBlock:
            with driver.sampled(cluster.now()):
                return SampleBlock(layout, t, label, plan.values())

        return collect

    async def stream_rate(self, cache: Any) -> float | None:
        return None  # no sockets to read

    async def reset_cache(self) -> str:
        return f"simulator: {self.cluster.reset_cache():,} cached blocks dropped"

    def hold_unsent(self, stopped: Callable[[], bool]) -> None:
        return None  # the simulator takes every request at once: none waits in the client

    def opened(self) -> dict[str, Any]:
        return {"label": self.label, "in_process": True}

    async def send(self, rec: RequestRecord, prompt: SimPrompt, max_tokens: int,
                   session: str, t0_ns: int = 0) -> None:
        """Run one request through the cluster and fill ``rec`` (failures are data; a
        cancellation is recorded, the request aborted in the engine, and re-raised)."""
        now = self.now_ns
        cl = self.cluster
        rec.sent_ns = now()
        req = cl.make_hashed(prompt.hashes, prompt.tokens, max_tokens=max_tokens,
                             ignore_eos=self.ignore_eos,
                             min_tokens=max_tokens if self.ignore_eos else 0, session=session)
        try:
            cl.submit(req)
        except SimRejected as e:
            rec.end_ns = now()
            rec.http_status = 400
            rec.status = records.ERROR
            rec.error_type = "http_400"
            rec.error_message = str(e)
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        # token events in compact arrays, stamped by the engine at each step's end (the
        # driver's ``clock_ns``): a row's hundreds of stamps are then one block of memory
        # for its journal line and its spool batch, and no call a token. Each event is one
        # token: their counts are written once, when the request ends
        ev_ns = array("q")
        res = StreamResult(ev_ns, array("i"))

        def progress(r: SimRequest) -> None:  # finished or aborted
            if (r.finished_at is not None or r.aborted) and not fut.done():
                fut.set_result(None)

        req.on_progress = progress
        req.token_ns = ev_ns
        rec.http_status = 200
        rec.result = res
        try:
            await fut
        except asyncio.CancelledError:
            cl.abort(req)
            rec.end_ns = now()
            rec.status = records.CANCELLED
            rec.error_type = "cancelled"
            rec.error_message = "cancelled at the deadline"
            raise
        finally:
            res.token_event_tokens = _ONE * len(ev_ns)
        rec.end_ns = now()
        if req.aborted:  # what the HTTP simulator's stream says when its engine drops one
            res.error_type = "stream_error"
            res.error_message = "request aborted by the engine"
            return
        res.done = True
        res.prompt_tokens = req.prompt_tokens
        res.completion_tokens = req.generated
        res.cached_tokens = req.cached_tokens
        parts = breakdown(req)
        if parts is not None:
            rec.breakdown_ns = tuple(round(x * 1e9) for x in parts)
