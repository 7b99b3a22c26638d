"""``start_simulator``: the simulator in a child process (``process``, the default) or in
the caller's event loop (``server``). Both of those import nothing from here."""

from __future__ import annotations

from typing import Literal, overload

from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim.process import SimProcess, spawn_simulator
from agentbench.sim.server import SimHandle, start_in_process


@overload
async def start_simulator(cfg: SimulatedEndpoint, host: str = ..., port: int = ..., *,
                          in_process: Literal[True]) -> SimHandle: ...


@overload
async def start_simulator(cfg: SimulatedEndpoint, host: str = ..., port: int = ..., *,
                          in_process: Literal[False] = ...) -> SimProcess: ...


async def start_simulator(cfg: SimulatedEndpoint, host: str = "127.0.0.1", port: int = 0, *,
                          in_process: bool = False) -> SimHandle | SimProcess:
    """Start the simulator and return once it answers ``/health``; ``port=0`` picks a free
    port. By default it runs in its own process (its CPU stays out of the caller's event
    loop and timings; it exits with the caller); ``in_process=True`` runs it in the running
    event loop, exposing the cluster (unit tests, the standalone ``serve-sim``)."""
    if not in_process:
        return await spawn_simulator(cfg, host, port)
    return await start_in_process(cfg, host, port)
