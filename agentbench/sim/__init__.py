"""agentbench's embedded serving simulator: an OpenAI-compatible server in front of a
simulated cluster of KV-cache-aware inference instances.

    handle = await start_simulator(cfg)   # cfg: agentbench.scenario.SimulatedEndpoint
    handle.url                            # e.g. http://127.0.0.1:40123 (API under /v1)
    await handle.close()

Modules: ``presets`` (timing parameters and their sources), ``prompt`` (token counts and
prefix-chained block hashes), ``kvcache`` (paged prefix cache), ``engine`` (one
instance's scheduler), ``cluster`` (router, shared tier, async driver), ``metrics``
(Prometheus text), ``server`` (HTTP).
"""

from agentbench.sim.server import SESSION_HEADER, SimHandle, start_simulator

__all__ = ["SESSION_HEADER", "SimHandle", "start_simulator"]
