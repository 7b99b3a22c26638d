"""A lean OpenAI-style SSE server on bare asyncio (no framework), for fidelity tests and
client benchmarks where the server must cost far less than the client.

It reads a request's ``max_tokens`` with a byte search (no JSON decoding) and answers with
a chunked SSE stream of that many one-token events (or ``--tokens`` when given). With
``--ttft``/``--itl`` zero the whole answer goes out in one write (like nginx serving a
file); ``--per-event`` writes every event separately and yields to the event loop between
two writes of one stream (every open stream writes once per round, as an engine's decode
step does), so each event leaves in its own ``send()`` and costs the client a read;
``--step S`` instead writes one event of every open stream per decode step of ``S``
seconds (one timer for all streams): events arrive spaced, each in its own read as long
as the client keeps up, and the offered rate is streams / S events per second.
Timing is relative: the first token ``ttft`` after the request arrived, each next one
``itl`` after the previous write, so no gap is ever shorter than asked. ``--log`` records
when each timed stream's first and last token events were written (``perf_counter_ns``,
the same clock as the client's on one machine), so a test can tell the client's own
delay apart from a late server.

    python -m agentbench.testing.fastserver --port 0 --ttft 0.05 --itl 0.005   # prints PORT n
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import itertools
import re
import threading
import time
from typing import TextIO

_MAX_TOKENS = re.compile(rb'"max_tokens"\s*:\s*(\d+)')
_CHAT_BASE = b'{"id":"x","object":"chat.completion.chunk","created":0,"model":"fast",'
_COMP_BASE = b'{"id":"x","object":"text_completion","created":0,"model":"fast",'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _usage(prompt: int, n: int) -> bytes:
    return (b'"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,'
            b'"prompt_tokens_details":{"cached_tokens":0}}' % (prompt, n, prompt + n))


def events(chat: bool, n: int, prompt: int = 1000) -> list[bytes]:
    """The SSE events of an answer with ``n`` one-token events (role event first for chat)."""
    out = []
    if chat:
        out.append(b"data: " + _CHAT_BASE + b'"choices":[{"index":0,"delta":{"role":'
                   b'"assistant","content":""},"finish_reason":null}]}\n\n')
    for i in range(n):
        fin = b'"length"' if i == n - 1 else b"null"
        if chat:
            ev = (_CHAT_BASE + b'"choices":[{"index":0,"delta":{"content":" tok"},'
                  b'"finish_reason":' + fin + b"}]}")
        else:
            ev = (_COMP_BASE + b'"choices":[{"index":0,"text":" tok","finish_reason":' + fin
                  + b"}]" + (b"," + _usage(prompt, n) if i == n - 1 else b"") + b"}")
        out.append(b"data: " + ev + b"\n\n")
    if chat:
        out.append(b"data: " + _CHAT_BASE + b'"choices":[],' + _usage(prompt, n) + b"}\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n")


class Ticker(threading.Thread):
    """Precise timers for many streams: a thread sleeps until the earliest due time and
    wakes the loop through ``call_soon_threadsafe``. The event loop's own timers round
    their waits up to whole milliseconds (epoll), so with many streams each token event
    would come up to 1 ms late; here a wake-up is late by ~0.1 ms."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(daemon=True, name="fastserver-ticker")
        self.loop = loop
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()

    def at(self, due: float) -> asyncio.Future[None]:
        """A future done at ``time.perf_counter() >= due``."""
        fut = self.loop.create_future()
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), fut))
            if self._heap[0][2] is fut:
                self._cond.notify()
        return fut

    def run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0][0] - time.perf_counter()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                now = time.perf_counter()
                ready = []
                while self._heap and self._heap[0][0] <= now:
                    ready.append(heapq.heappop(self._heap)[2])
            for fut in ready:
                self.loop.call_soon_threadsafe(_wake, fut)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _Conn(asyncio.Protocol):
    def __init__(self, srv: FastServer) -> None:
        self.srv = srv
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next()

    def _next(self) -> None:
        if self.busy:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end]
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        length = int(m.group(1)) if m else 0
        if len(self.buf) < end + 4 + length:
            return
        body = self.buf[end + 4:end + 4 + length]
        self.buf = self.buf[end + 4 + length:]
        t_recv = time.perf_counter()
        line = head.split(b"\r\n", 1)[0]
        if line.startswith(b"GET /metrics"):
            text = b"# TYPE fast_requests_total counter\nfast_requests_total %d\n" % (
                self.srv.count)
            self._write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d"
                        b"\r\n\r\n%s" % (len(text), text))
            self._next()
            return
        if line.startswith((b"GET /health", b"GET /v1/models")):  # readiness probes
            text = (b"ok\n" if b"/health" in line else
                    b'{"object":"list","data":[{"id":"fast","object":"model"}]}')
            self._write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text))
            self._next()
            return
        if not line.startswith(b"POST"):
            self._write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            self._next()
            return
        self.srv.count += 1
        chat = b"/chat/" in line
        n = self.srv.tokens
        if n is None:
            mt = _MAX_TOKENS.search(body)
            n = int(mt.group(1)) if mt else 16
        evs = self.srv.cached_events(chat, n)
        if self.srv.ttft_s == 0 and self.srv.itl_s == 0 and not self.srv.per_event:
            self._write(_HEAD + _chunk(b"".join(evs)) + b"0\r\n\r\n")
            self._next()
            return
        self.busy = True
        rid = re.search(rb"(?i)\r\nx-request-id:\s*(\S+)", head)
        asyncio.ensure_future(self._stream(evs, chat, t_recv, rid.group(1) if rid else b"-"))

    async def _stream(self, evs: list[bytes], chat: bool, t_recv: float, rid: bytes) -> None:
        srv = self.srv
        first_ns = last_ns = 0
        i = 0
        if chat:  # role-only event at once
            self._write(_HEAD + _chunk(evs[0]))
            i = 1
        else:
            self._write(_HEAD)
        if srv.ttft_s > 0:
            await srv.sleep_until(t_recv + srv.ttft_s)
        last = len(evs) - (2 if chat else 1)  # token events end here
        # per event without an ITL: yield to the loop after each write, so every other
        # stream writes once before this one writes again (as an engine's decode step
        # does): each event leaves in its own send() and, unless the client falls behind,
        # arrives in its own read (back-to-back writes would coalesce in the socket)
        step = srv.per_event and srv.itl_s <= 0
        if step and i:
            await srv.pace()
        while i < last:
            last_ns = time.perf_counter_ns()
            first_ns = first_ns or last_ns
            self._write(_chunk(evs[i]))
            i += 1
            if i < last and srv.itl_s > 0:
                await srv.sleep_until(last_ns / 1e9 + srv.itl_s)
            elif step:
                await srv.pace()
        if step:  # the usage event on its own; [DONE] with the stream's end
            while i < len(evs) - 1:
                self._write(_chunk(evs[i]))
                i += 1
                await srv.pace()
        self._write(_chunk(b"".join(evs[i:])) + b"0\r\n\r\n")
        if srv.log is not None:  # when each token event was written: the server's truth
            srv.log.write(f"{rid.decode()} {first_ns} {last_ns} {last - (1 if chat else 0)} "
                          f"{int(t_recv * 1e9)}\n")
            srv.log.flush()
        self.busy = False
        self._next()

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class FastServer:
    def __init__(self, ttft_s: float = 0.0, itl_s: float = 0.0, tokens: int | None = None,
                 per_event: bool = False, log: TextIO | None = None,
                 step_s: float = 0.0) -> None:
        self.log = log
        self.step_s = step_s
        self._step: asyncio.Future[None] | None = None
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.tokens = tokens
        self.per_event = per_event
        self.count = 0
        self._events: dict[tuple[bool, int], list[bytes]] = {}
        self._ticker: Ticker | None = None
        self.server: asyncio.base_events.Server | None = None

    async def sleep_until(self, due: float) -> None:
        """Wait until ``time.perf_counter() >= due`` (precisely, see ``Ticker``)."""
        if due <= time.perf_counter():
            return
        if self._ticker is None:
            self._ticker = Ticker(asyncio.get_running_loop())
            self._ticker.start()
        await self._ticker.at(due)

    async def pace(self) -> None:
        """Between two per-event writes of a stream: the next decode step (``step_s``), or
        one turn of the event loop."""
        if self.step_s <= 0:
            await asyncio.sleep(0)
            return
        if self._step is None:
            loop = asyncio.get_running_loop()
            self._step = loop.create_future()
            now = loop.time()
            loop.call_at(now + self.step_s - now % self.step_s, self._tick)
        await self._step

    def _tick(self) -> None:
        fut, self._step = self._step, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def cached_events(self, chat: bool, n: int) -> list[bytes]:
        key = (chat, n)
        evs = self._events.get(key)
        if evs is None:
            evs = self._events[key] = events(chat, n)
        return evs

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _Conn(self), host, port, backlog=4096)
        return int(self.server.sockets[0].getsockname()[1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Lean SSE server for client benchmarks.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", type=float, default=0.0)
    ap.add_argument("--itl", type=float, default=0.0)
    ap.add_argument("--tokens", type=int, default=None,
                    help="events per answer (default: the request's max_tokens)")
    ap.add_argument("--per-event", action="store_true",
                    help="one write per SSE event, a yield to the loop between two")
    ap.add_argument("--step", type=float, default=0.0,
                    help="with --per-event: one event per open stream every STEP s (a "
                         "decode step) instead of every loop turn")
    ap.add_argument("--log", default=None,
                    help="append 'request-id first_ns last_ns events recv_ns' per timed "
                         "stream (perf_counter_ns of the writes and of the request's arrival)")
    args = ap.parse_args(argv)

    async def serve() -> None:
        log = open(args.log, "a") if args.log else None  # noqa: SIM115 - lives as long as we do
        srv = FastServer(args.ttft, args.itl, args.tokens, args.per_event, log, args.step)
        port = await srv.start(args.host, args.port)
        print(f"PORT {port}", flush=True)
        await asyncio.Event().wait()

    from agentbench.transport.loop import use_fast_loop

    use_fast_loop()  # uvloop when installed: a server must cost far less than its client
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
