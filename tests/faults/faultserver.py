"""The fault suite's own server: agentbench's fake OpenAI server in a process of its own
(so a test can kill it and start it again on the same port), with a fault schedule and a
log of every streamed request it saw.

    python tests/faults/faultserver.py --port 0 --faults ok,http500,reset --log seen.log

``--faults`` is cycled over the streamed requests in arrival order (``ok``: no fault).
The log gets ``seen <n> <fault>`` when a streamed request arrives and ``done <n>`` when
the server has sent all of its response (each line one unbuffered write, so a killed
server's log is complete up to the kill). Prints ``PORT <n>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import time
from typing import Any

from aiohttp import web

from agentbench.testing.fakeserver import FAULTS, FakeServer, ServerConfig


class LoggedServer(FakeServer):
    """FakeServer that logs each streamed request's arrival and end."""

    log_fd: int = -1
    streamed: set[int]  # server request numbers of the streamed requests (set in main)

    def log(self, line: str) -> None:
        os.write(self.log_fd, f"{line} {time.time_ns()}\n".encode())

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        n = self.count
        resp = await super()._handle(request)
        if n in self.streamed:
            self.log(f"done {n}")
        return resp


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--faults", default="ok", help="comma list cycled over streamed requests")
    ap.add_argument("--log", required=True)
    ap.add_argument("--ttft", type=float, default=0.0)
    ap.add_argument("--itl", type=float, default=0.0)
    ap.add_argument("--retry-after", type=float, default=0.2)
    ap.add_argument("--stall", type=float, default=30.0)
    args = ap.parse_args(argv)
    faults = args.faults.split(",")
    unknown = set(faults) - set(FAULTS) - {"ok"}
    if unknown:
        ap.error(f"unknown faults {sorted(unknown)}; known: ok, {', '.join(FAULTS)}")
    cycle = itertools.cycle(faults)
    srv: LoggedServer

    def fault(n: int, body: dict[str, Any]) -> str | None:
        if not body.get("stream"):
            return None  # the client's start-up probe
        f = next(cycle)
        srv.streamed.add(n)
        srv.log(f"seen {n} {f}")
        return None if f == "ok" else f

    cfg = ServerConfig(ttft_s=args.ttft, itl_s=args.itl, fault=fault, keep_requests=False,
                       retry_after_s=args.retry_after, stall_s=args.stall)
    srv = LoggedServer(cfg)
    srv.streamed = set()
    srv.log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(srv.serve_forever("127.0.0.1", args.port))


if __name__ == "__main__":
    main()
