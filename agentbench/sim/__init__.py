"""agentbench's embedded serving simulator: an OpenAI-compatible server in front of a
simulated cluster of KV-cache-aware inference instances.

    handle = await start_simulator(cfg)   # cfg: agentbench.scenario.SimulatedEndpoint
    handle.url                            # e.g. http://127.0.0.1:40123 (API under /v1)
    await handle.close()

It runs in its own process by default (``process``), so its CPU never counts in the
client's times; ``start_simulator(cfg, in_process=True)`` runs it in the caller's event
loop and exposes ``handle.cluster``.

Modules: ``presets`` (timing parameters and their sources), ``prompt`` (token counts and
prefix-chained block hashes), ``kvcache`` (paged prefix cache), ``engine`` (one
instance's scheduler), ``cluster`` (router, shared tier, async driver), ``metrics``
(Prometheus text), ``server`` (HTTP), ``process`` (the child process).
"""

from agentbench.sim.process import SimProcess, SimulatorStartError
from agentbench.sim.server import SESSION_HEADER, SimHandle, start_simulator

__all__ = ["SESSION_HEADER", "SimHandle", "SimProcess", "SimulatorStartError",
           "start_simulator"]
