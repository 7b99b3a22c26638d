"""The simulator's start-up error, shared by the in-process server (``server``) and the
child process (``process``) without either importing the other's start-up code."""

from __future__ import annotations

from agentbench.errors import InputError


class SimulatorStartError(InputError):
    """The simulator did not come up (port in use, bad preset...): one line saying why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, source="simulator")
