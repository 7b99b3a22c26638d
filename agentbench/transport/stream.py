"""HTTP/1.1 for the streaming hot path: one ``asyncio.Protocol`` per keep-alive connection
that stamps each socket read and keeps its bytes, nothing else, while a response streams.

aiohttp costs ~10 us of CPU per socket read on the way to the caller (a read-timeout timer
rescheduled per read, its parser's callbacks per HTTP chunk, a stream-reader buffer, a
future and a task step to wake the reader). An engine writes every SSE event separately, so
a 128-token answer is ~130 reads: ~1.3 ms per request in the client before anything is
measured. Here ``data_received`` appends ``(perf_counter_ns, bytes)`` and checks whether
the response ended; the HTTP chunk framing is removed once, after the last byte
(:mod:`agentbench.transport.chunked`), and the stall timeout is one timer per request
that re-arms itself from the last read's stamp instead of a timer per read. Connections
come from :class:`agentbench.transport.pool.Pool`.

A response holds at most ``MAX_RESPONSE_BYTES`` of body, and one SSE event at most
``MAX_EVENT_BYTES``: a running byte count, compared on each read, calls a check once per
``CHECK_EVERY`` bytes (which looks for a blank line only in the reads since the last one),
and past either cap the request fails, its connection closed.

A stream's last event (``data: [DONE]``, ``response.completed``, ``message_stop``) ends the
request even when the body does not end after it; the request's timer looks for it
(:mod:`agentbench.transport.streamtimer`: the timer, the deadline, the stall timeout and
the end at the last event).

Errors keep the words the replay records (``error_type``): ``connect_error``,
``connect_timeout``, ``stall_timeout``, ``timeout``, ``disconnected``,
``response_too_large``."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from agentbench.transport.chunked import chunk_state, decode_chunked
from agentbench.transport.response import Response
from agentbench.transport.sse import event_start
from agentbench.transport.streamtimer import END_GRACE_S as END_GRACE_S  # re-exported
from agentbench.transport.streamtimer import Timer, arm, end_due, ended_at_last_event

if TYPE_CHECKING:
    from agentbench.transport.pool import Pool

perf_ns = time.perf_counter_ns

#: response body kinds
_CHUNKED, _LENGTH, _CLOSE, _NONE = 0, 1, 2, 3
#: how far back the end of a chunked body is looked for (the last chunk and its trailers)
_TAIL = 1024
#: error bodies are kept up to this size (the record keeps 2,000 characters)
_MAX_ERROR_BODY = 64 * 1024
_MIB = 1024 * 1024
#: body bytes one response may bring: twice the largest answer a request can ask for (a
#: 128K-token answer streamed one token per event is ~32 MiB at ~250 bytes an event); a
#: response past it fails (``response_too_large``), so memory per request in flight is
#: bounded whatever a server sends
MAX_RESPONSE_BYTES = 64 * _MIB
#: bytes one SSE event (or line) may run without a blank line: 8x a whole 128K-token answer
#: sent as one event (~512 KiB of text); an event is cut somewhere between this and this
#: plus ``CHECK_EVERY``
MAX_EVENT_BYTES = 4 * _MIB
#: body bytes between two checks of both caps
CHECK_EVERY = _MIB


class StreamError(Exception):
    """A failed request: ``kind`` is the record's ``error_type``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Conn(asyncio.Protocol, asyncio.BufferedProtocol):
    """One keep-alive connection; one response at a time.

    Both kinds of protocol, so that each loop takes its cheaper read path. asyncio's
    selector loop sees a buffered protocol: it reads into the pool's one buffer and the
    bytes are copied out at their size (its plain path's ``recv(256 KiB)`` allocates
    256 KiB per read and shrinks it, which with one read per event cost ~3x the system
    time). uvloop treats any ``asyncio.Protocol`` as plain: it reads into its own buffer
    and calls ``data_received`` with bytes of the read's size, one Python call per read
    where the buffered path costs two and a copy (``benchmarks/client_bench.py``)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.alive = False
        self.resp: Response | None = None
        self.done: asyncio.Future[None] | None = None
        self.head = b""
        self.mode = _NONE
        self.left = 0  # Content-Length bytes still to come
        self.got = 0  # body bytes of this response so far
        self.check_at = CHECK_EVERY  # ``got`` past which the caps are checked (_too_large)
        self.scanned = 0  # reads looked at for an event's end
        self.event_at = 0  # body offset where the current SSE event started
        self.keep = True
        self.last_ns = 0
        self.t0 = 0
        self.idle_since = 0.0
        self.api = "chat"
        self.looked = 0  # reads looked in for the bytes of the stream's last event
        self.tail = b""  # the last bytes of those reads (the bytes cut between two reads)
        self.marked = 0  # perf_ns of the last read with those bytes, until the stream is read
        self.again = False  # those bytes came in an event not ended: look at the next read
        self.settled = 0  # reads when the stream, quiet, was last read (streamtimer.settled)
        self._drain: asyncio.Future[None] | None = None
        self._paused = False

    # -- asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.alive = True

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.pool.view  # filled and read before any other connection's next read

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.pool.view[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        now = perf_ns()
        self.last_ns = now
        t = now - self.t0
        resp = self.resp
        if resp is None:  # bytes nobody asked for: the connection cannot be trusted
            self.keep = False
            self.alive = False  # the pool hands out only live connections
            if self.transport is not None:
                self.transport.close()
            return
        if self.mode == _CHUNKED:  # the hot path: a stamp, an append, a count, a tail check
            resp.times.append(t)
            resp.reads.append(data)
            self.got += len(data)
            # the end can only be here; an error body is also capped (_MAX_ERROR_BODY)
            if data.endswith(b"\r\n\r\n") or len(data) < 4 or resp.status != 200 \
                    or self.got > self.check_at:
                self._check_chunked_end()
            return
        if self.done is None or self.done.done():  # bytes after the end or a failure
            return
        if not resp.status:
            self._head(data, t)
            return
        self._body(data, t)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost decides what it meant

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        resp = self.resp
        if resp is None or self.done is None or self.done.done():
            self._stop_writing()  # an answer that came before the body was all sent
            return
        if resp.status and self.mode == _CLOSE:
            self._finish()
        elif not resp.status:
            self._fail("disconnected", "ServerDisconnectedError: Server disconnected")
        else:
            why = f" ({exc})" if exc else ""
            self._fail("disconnected", "ClientPayloadError: Response payload is not "
                       f"completed: the server closed the connection{why}")

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    # -- one exchange

    async def write(self, data: bytes) -> None:
        assert self.transport is not None
        if self.done is not None and self.done.done():
            return  # answered already (see _stop_writing): the rest of the body is moot
        if not self.alive:
            raise StreamError("disconnected",
                              "ServerDisconnectedError: Server disconnected")
        self.transport.write(data)
        if self._paused:
            self._drain = asyncio.get_running_loop().create_future()
            await self._drain

    def begin(self, t0_ns: int, api: str = "chat") -> Response:
        """A new exchange; reads are stamped ``perf_counter_ns() - t0_ns``; ``api``: how the
        stream it brings ends (``apis.END_MARKS``)."""
        self.t0 = t0_ns
        self.api = api
        self.looked = self.marked = self.settled = 0
        self.tail = b""
        self.again = False
        self.resp = Response()
        self.done = asyncio.get_running_loop().create_future()
        self.head = b""
        self.mode = _NONE
        self.keep = True
        self.last_ns = perf_ns()
        self.got = self.scanned = self.event_at = 0
        self.check_at = CHECK_EVERY
        return self.resp

    def _head(self, data: bytes, t: int) -> None:
        buf = self.head + data if self.head else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                self._fail("disconnected", "ClientResponseError: response head too long")
            self.head = buf
            return
        self.head = b""
        resp = self.resp
        assert resp is not None
        lines = buf[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        code = parts[1] if len(parts) > 1 else ""
        if len(code) != 3 or not code.isascii() or not code.isdigit():  # RFC 9112: 3DIGIT
            self._fail("disconnected",
                       f"ClientResponseError: bad status line {lines[0][:200]!r}")
            return
        status = int(code)
        rest = buf[end + 4:]
        if 100 <= status < 200:  # 100 Continue and friends: the real answer follows
            if rest:
                self._head(rest, t)
            return
        headers = resp.headers
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        resp.status = status
        resp.reason = parts[2] if len(parts) > 2 else ""
        conn = headers.get("connection", "").lower()
        if conn == "close" or (parts[0] == "HTTP/1.0" and conn != "keep-alive"):
            self.keep = False
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.mode = _CHUNKED
            resp.chunked = True
        elif "content-length" in headers:
            self.mode = _LENGTH
            try:
                self.left = int(headers["content-length"])
                if self.left < 0:
                    raise ValueError(self.left)
            except ValueError:
                self._fail("disconnected", "ClientResponseError: bad Content-Length")
                return
        elif status in (204, 304):
            self.mode = _LENGTH
            self.left = 0
        else:
            self.mode = _CLOSE
            self.keep = False
        if self.mode == _LENGTH and self.left == 0:
            self._finish()
        elif rest:
            if self.mode == _CHUNKED:
                resp.times.append(t)
                resp.reads.append(rest)
                self.got += len(rest)
                self._check_chunked_end()
            else:
                self._body(rest, t)

    def _body(self, data: bytes, t: int) -> None:
        resp = self.resp
        assert resp is not None
        if self.mode == _LENGTH:
            if len(data) > self.left:
                data = data[:self.left]
                self.keep = False
            self.left -= len(data)
        if data:
            resp.times.append(t)
            resp.reads.append(data)
            self.got += len(data)
            if self.got > self.check_at and self._too_large():
                return
        if self.mode == _LENGTH and self.left <= 0:
            self._finish()
        elif resp.status != 200 and self.got > _MAX_ERROR_BODY:
            self.keep = False
            self._finish()

    def _check_chunked_end(self) -> None:
        resp = self.resp
        assert resp is not None
        if self.got > self.check_at and self._too_large():
            return
        reads, i = resp.reads, len(resp.reads) - 1
        tail = reads[i]
        while len(tail) < _TAIL and i > 0:  # the last KiB, whatever the reads' sizes
            i -= 1
            tail = reads[i] + tail
        state = chunk_state(tail, tail=True)
        if state == "maybe":
            dec = decode_chunked(b"".join(resp.reads))
            if isinstance(dec, str):
                state = dec
            else:
                resp.decoded = dec
                state = "complete"
        if state == "complete":
            self._finish()
        elif state == "bad":
            self._fail("disconnected", "ClientPayloadError: Response payload is not "
                       "completed: malformed chunked encoding")
        elif resp.status != 200 and self.got > _MAX_ERROR_BODY:
            self.keep = False
            self._finish()

    def _too_large(self) -> bool:
        """At a check point (every ``CHECK_EVERY`` body bytes): fail the request when the
        body is past ``MAX_RESPONSE_BYTES`` or its current SSE event past
        ``MAX_EVENT_BYTES`` (:func:`~agentbench.transport.sse.event_start` looks at each
        read once)."""
        resp = self.resp
        assert resp is not None
        got = self.got
        self.check_at = min(got + CHECK_EVERY, max(got, MAX_RESPONSE_BYTES))
        if got > MAX_RESPONSE_BYTES:
            self._fail("response_too_large", f"the response passed {MAX_RESPONSE_BYTES // _MIB}"
                       " MiB and was cut off (MAX_RESPONSE_BYTES)")
            return True
        if resp.status != 200:
            return False
        self.event_at = event_start(resp.reads, self.scanned, got, self.event_at)
        self.scanned = len(resp.reads)
        if got - self.event_at > MAX_EVENT_BYTES:
            self._fail("response_too_large", f"an SSE event passed {MAX_EVENT_BYTES // _MIB} "
                       "MiB without a blank line and was cut off (MAX_EVENT_BYTES)")
            return True
        return False

    def _end_due(self) -> float | None:
        """Seconds until the stream is read for its last event (``streamtimer.end_due``);
        None unless a 200 body is being read."""
        resp = self.resp
        if resp is None or resp.status != 200 or self.mode == _NONE:
            return None
        return end_due(self, resp)

    def _ended_at_last_event(self) -> bool:
        """Whether the stream ended at its last event, the request then over
        (``streamtimer.ended_at_last_event``); False unless a 200 body is being read."""
        resp = self.resp
        if resp is None or resp.status != 200 or self.mode == _NONE or not resp.reads:
            return False
        return ended_at_last_event(self, resp)

    def _finish(self) -> None:
        self.mode = _NONE
        if self.done is not None and not self.done.done():
            self.done.set_result(None)
        self._stop_writing()

    def _stop_writing(self) -> None:
        """The answer is in (or the connection gone) while the body is still being written
        (a server may answer 413 before reading it): the writer stops, and the connection,
        with unsent bytes, is not used again."""
        if self._drain is not None and not self._drain.done():
            self.keep = False
            self._drain.set_result(None)

    def _fail(self, kind: str, message: str) -> None:
        self.mode = _NONE
        self.keep = False
        if self.done is not None and not self.done.done():
            self.done.set_exception(StreamError(kind, message))
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(StreamError(kind, message))

    def arm(self, sock_read: float | None, deadline: float | None, total: float | None
            ) -> Timer:
        """One timer for the exchange: the deadline, the stall timeout and the stream's
        last event (``streamtimer.arm``)."""
        return arm(self, sock_read, deadline, total)

    def end(self, reuse: bool) -> None:
        """The exchange is over: back to the pool, or closed."""
        self.resp = None
        self.done = None
        self.mode = _NONE
        if reuse and self.keep and self.alive:
            self.pool.release(self)
        else:
            self.close()

    def close(self) -> None:
        self.alive = False
        if self.transport is not None:
            self.transport.close()
        self.pool.gone()

