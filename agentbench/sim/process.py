"""The simulator in its own process, so its CPU never inflates the client's measured times.

The parent starts ``python -m agentbench.sim.process`` with the endpoint config as JSON,
keeps the child's stdin open, and reads one line from its stdout: ``READY <url>`` once
the server listens, or ``ERROR <one line>``. The child stops on SIGTERM (``close()``) or
when its stdin reaches end-of-file, which the kernel delivers when the parent exits for any
reason (even SIGKILL): a simulator never outlives the run that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agentbench.errors import InputError
from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim.errors import SimulatorStartError
from agentbench.sim.server import start_in_process

READY = "READY "
ERROR = "ERROR "
START_TIMEOUT_S = 60.0  # import + cluster set-up; a few tenths of a second when idle


@dataclass
class SimProcess:
    """A simulator running in a child process: ``url`` (API under /v1), ``pid``, ``close()``."""

    url: str
    pid: int
    proc: asyncio.subprocess.Process
    log: IO[bytes]  # the child's stderr (read back when it fails)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop the child by its PID (SIGTERM: in-flight requests end with an error event,
        then the server stops) and wait for it; SIGKILL if it has not exited in time."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                await self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.log.close()


def _tail(log: IO[bytes], n: int = 4) -> str:
    """The last ``n`` non-empty lines of the child's stderr, joined on one line."""
    with contextlib.suppress(OSError):
        log.seek(0)
        lines = [x.strip() for x in log.read().decode(errors="replace").splitlines()
                 if x.strip()]
        return " | ".join(lines[-n:])
    return ""


async def spawn_simulator(cfg: SimulatedEndpoint, host: str, port: int) -> SimProcess:
    """Start the simulator process and return once it answers ``/health``."""
    import aiohttp

    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by SimProcess.close)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # importable even when not installed
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentbench.sim.process", cfg.model_dump_json(), host,
        str(port), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=log, env=env, start_new_session=True)  # no terminal Ctrl-C: the parent stops it
    handle = SimProcess(url="", pid=proc.pid, proc=proc, log=log)
    try:
        assert proc.stdout is not None
        try:
            line = (await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)).decode()
        except TimeoutError:
            raise SimulatorStartError(f"process {proc.pid} did not start within "
                                      f"{START_TIMEOUT_S:.0f} s") from None
        if not line.startswith(READY):
            if line.startswith(ERROR):
                raise SimulatorStartError(line[len(ERROR):].strip())
            why = _tail(log) or f"exited with status {await proc.wait()}"
            raise SimulatorStartError(f"failed to start on {host}:{port}: {why}")
        handle.url = line[len(READY):].strip()
        async with aiohttp.ClientSession() as s, \
                s.get(handle.url + "/health", timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                raise SimulatorStartError(f"{handle.url}/health answered "
                                          f"{r.status}")
    except BaseException:
        await handle.close(timeout_s=5.0)
        raise
    return handle


class _ParentPipe(asyncio.Protocol):
    """Stdin of the child: the parent never writes; end-of-file means it closed the pipe or
    died, and the simulator stops."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop.set()


async def _serve(cfg: SimulatedEndpoint, host: str, port: int, out: IO[str]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        handle = await start_in_process(cfg, host=host, port=port)
    except (InputError, ValueError, KeyError) as e:
        msg = e.message if isinstance(e, InputError) else \
            f"failed to start: {e.args[0] if isinstance(e, KeyError) else e}"
        out.write(f"{ERROR}{' '.join(msg.split())}\n")
        out.flush()
        raise SystemExit(2) from None
    await loop.connect_read_pipe(lambda: _ParentPipe(stop), sys.stdin)
    out.write(f"{READY}{handle.url}\n")
    out.flush()
    try:
        await stop.wait()
    finally:
        await handle.close()


def main(argv: list[str]) -> None:
    """Child entry point: ``python -m agentbench.sim.process CFG_JSON HOST PORT``."""
    out = sys.stdout
    try:
        cfg = SimulatedEndpoint.model_validate_json(argv[0])
        host, port = argv[1], int(argv[2])
    except Exception as e:  # noqa: BLE001 (reported to the parent as one line)
        out.write(f"{ERROR}bad arguments: {' '.join(str(e).split())}\n")
        out.flush()
        raise SystemExit(2) from None
    sys.stdout = sys.stderr  # stray prints must not look like the READY line
    asyncio.run(_serve(cfg, host, port, out))


if __name__ == "__main__":
    main(sys.argv[1:])
