"""Keep-alive connections to one origin for :mod:`agentbench.transport.stream`: handed
out most recently used first, at most ``limit`` open, idle ones closed after
``KEEPALIVE_S``."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Mapping

from agentbench.transport.stream import Conn, StreamError

#: an idle keep-alive connection is closed after this many seconds (aiohttp's default)
KEEPALIVE_S = 15.0
#: bytes one socket read may bring
READ_BUFFER = 256 * 1024


class Pool:
    """Keep-alive connections to one origin, most recently used first; at most ``limit``
    open at once (0: no limit), as the endpoint's aiohttp connector allows."""

    def __init__(self, url: str, limit: int = 0) -> None:
        from yarl import URL

        u = URL(url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL: {url}")
        self.host = u.host or "localhost"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.tls = u.scheme == "https"
        self.path = u.raw_path_qs or "/"
        default = (self.port == 443) if self.tls else (self.port == 80)
        self.hostport = self.host if default else f"{self.host}:{self.port}"
        self.limit = limit
        #: what every connection of the pool reads into (one read at a time, see Conn)
        self.view = memoryview(bytearray(READ_BUFFER))
        self.idle: deque[Conn] = deque()
        self.open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ssl: ssl.SSLContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    def head(self, headers: Mapping[str, str], length: int) -> bytes:
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {self.hostport}",
                 *(f"{k}: {v}" for k, v in headers.items()),
                 f"Content-Length: {length}", "", ""]
        return "\r\n".join(lines).encode("latin-1", "replace")

    async def acquire(self, connect_timeout: float | None) -> Conn:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (a test, a worker): start afresh
            self.idle.clear()
            self.open = 0
            self._waiters.clear()
            self._sweeper = None
            self._loop = loop
        while self.idle:
            c = self.idle.pop()
            if c.alive:
                return c
            self.open -= 1
        while self.limit and self.open >= self.limit:
            w = loop.create_future()
            self._waiters.append(w)
            try:
                await w
            except BaseException:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(w)
                raise
            while self.idle:
                c = self.idle.pop()
                if c.alive:
                    return c
                self.open -= 1
        self.open += 1
        try:
            return await self._connect(loop, connect_timeout)
        except BaseException:
            self.open -= 1
            self._wake()
            raise

    async def _connect(self, loop: asyncio.AbstractEventLoop,
                       timeout: float | None) -> Conn:
        if self.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        try:
            async with asyncio.timeout(timeout):
                _, proto = await loop.create_connection(
                    lambda: Conn(self), self.host, self.port,
                    ssl=self._ssl if self.tls else None)
        except TimeoutError:
            raise StreamError("connect_timeout",
                              f"Connection timeout to host {self.host}:{self.port}") from None
        except OSError as e:
            raise StreamError("connect_error",
                              f"Cannot connect to host {self.host}:{self.port} ssl:"
                              f"{'default' if self.tls else False} "
                              f"[{e.strerror or type(e).__name__}]") from None
        return proto

    def release(self, c: Conn) -> None:
        loop = self._loop
        if loop is not None:
            c.idle_since = loop.time()
            if self._sweeper is None:
                self._sweeper = loop.call_later(KEEPALIVE_S, self._sweep)
        self.idle.append(c)
        self._wake()

    def _sweep(self) -> None:
        """Close connections idle for ``KEEPALIVE_S`` (as aiohttp's connector does), so a
        long-lived event loop that runs many replays keeps no sockets of finished ones."""
        self._sweeper = None
        if self._loop is None:
            return
        now = self._loop.time()
        while self.idle and now - self.idle[0].idle_since >= KEEPALIVE_S:
            c = self.idle.popleft()
            self.open -= 1
            c.alive = False
            if c.transport is not None:
                c.transport.close()
        if self.idle:
            self._sweeper = self._loop.call_later(
                KEEPALIVE_S - (now - self.idle[0].idle_since), self._sweep)

    def gone(self) -> None:
        self.open = max(0, self.open - 1)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def close(self) -> None:
        """Close the idle connections (those in use close when their exchange ends)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        while self.idle:
            c = self.idle.pop()
            c.alive = False
            if c.transport is not None:
                c.transport.close()
        self.open = 0
