"""agentbench's embedded serving simulator: an OpenAI-compatible server in front of a
simulated cluster of KV-cache-aware inference instances.

    handle = await start_simulator(cfg)   # cfg: agentbench.scenario.model.SimulatedEndpoint
    handle.url                            # e.g. http://127.0.0.1:40123 (API under /v1)
    await handle.close()

It runs in its own process by default (``process``), so its CPU never counts in the
client's times; ``start_simulator(cfg, in_process=True)`` runs it in the caller's event
loop and exposes ``handle.cluster``.

In a virtual-time run (the default for simulated endpoints) none of that HTTP is used: the
replay drives the cluster in its own process on its own simulated clock
(``agentbench.transport.simulated``, ``virtual.TimerDriver``).

Modules: ``presets`` (timing parameters and their sources, shipped as
``preset_files/*.yaml``), ``presetfile`` (reading and writing preset files),
``presetcheck`` (the presets a scenario names, checked before a run), ``cost`` (the
step-time model: every step's duration), ``prompt`` (token counts and prefix-chained block
hashes), ``kvcache`` (paged prefix cache stored as runs of blocks) and ``kvties`` (its
closed-form eviction of equal-time chains), ``engine`` (one instance's scheduler),
``admission`` (a request's prefix matched in the tiers and its blocks reserved),
``decoderuns`` (its decode-only steps computed ahead), ``slots`` (an instance scheduled as
llama.cpp's llama-server: ``scheduler: slots``), ``cluster`` (router, shared tier,
wall-clock driver), ``virtual`` (virtual-time drivers), ``histogram`` (latency histograms),
``metrics`` (Prometheus text), ``server`` (HTTP), ``process`` (the child process),
``launch`` (``start_simulator``), ``errors`` (``SimulatorStartError``).
"""

from agentbench.sim import native

native.install()  # first: an opt-in compiled engine (AGENTBENCH_NATIVE) replaces modules
from agentbench.sim.errors import SimulatorStartError  # noqa: E402
from agentbench.sim.launch import start_simulator  # noqa: E402
from agentbench.sim.process import SimProcess  # noqa: E402
from agentbench.sim.routes_common import SESSION_HEADER  # noqa: E402
from agentbench.sim.server import SimHandle  # noqa: E402

__all__ = ["SESSION_HEADER", "SimHandle", "SimProcess", "SimulatorStartError",
           "start_simulator"]
