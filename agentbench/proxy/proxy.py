"""The recording proxy (aiohttp): every request is forwarded to the upstream server and
every response relayed back untouched, chunk by chunk as it arrives; LLM calls
(``POST .../chat/completions``, ``.../completions``, ``.../responses`` and ``.../messages``)
are recorded.

The request path only stamps times and keeps the bytes it relays; counting, hashing and
writing happen after the response's last byte went out (the recorder,
:mod:`agentbench.proxy.recorder`), so they add nothing to the call's TTFT; a response past
a few MB is read as it is relayed, keeping only what the analysis needs
(:mod:`agentbench.proxy.reply`), so memory stays bounded.
Headers are forwarded as sent (hop-by-hop ones aside; the upstream URL's
``user:password@`` replaces the client's Authorization) and never written anywhere; the
upstream URL's query goes on every request (:mod:`agentbench.proxy.upstream`); the
response body is relayed with its own encoding (the client session does not decompress).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from agentbench.errors import InputError, quiet_bad_http
from agentbench.proxy import store
from agentbench.proxy.recorder import RecordConfig, Recorder
from agentbench.proxy.reply import ResponseTap
from agentbench.proxy.upstream import Upstream, shown
from agentbench.scenario.secrets import secret_key

#: hop-by-hop headers (RFC 9110 §7.6.1) and the ones aiohttp sets itself
_REQUEST_DROP = frozenset({"host", "content-length", "transfer-encoding", "connection",
                           "keep-alive", "proxy-connection", "proxy-authorization", "te",
                           "trailer", "upgrade"})
_RESPONSE_DROP = frozenset({"transfer-encoding", "connection", "keep-alive",
                            "proxy-connection", "trailer", "upgrade"})
#: request Content-Encodings the aiohttp server decodes before the body is read
_DECODED = frozenset({"gzip", "deflate", "br", "zstd"})
_LLM_PATHS = ("/chat/completions", "/completions", "/responses", "/messages")


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    if int(port) > 65535:
        raise ValueError(f"expected a port of 0-65535, got {port}")
    return host.strip("[]"), int(port)


class Proxy:
    """The aiohttp handler: forward, relay, stamp, hand the call to the recorder."""

    def __init__(self, cfg: RecordConfig, recorder: Recorder) -> None:
        self.upstream = Upstream.parse(cfg.upstream)
        self.auth = self.upstream.auth
        self.cfg = cfg
        self.recorder = recorder
        self.client: aiohttp.ClientSession | None = None
        #: the upstream answers being relayed, and the requests still waiting for one
        #: (``cut`` ends both)
        self.relaying: set[aiohttp.ClientResponse] = set()
        self.waiting: set[asyncio.Task[aiohttp.ClientResponse]] = set()
        self.cutting = False

    async def start(self) -> None:
        self.client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            auto_decompress=False,  # relay the bytes as the server encoded them
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"))

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def cut(self) -> None:
        """End the relays in flight now (a second Ctrl-C while the trace is written): each
        upstream answer's connection closes, and its relay ends as an upstream that broke
        off does (the call journaled as ``relay stopped``, its client's answer broken); a
        request the upstream has not begun to answer is given up (its client gets a 502,
        nothing is journaled: there is no answer to record)."""
        self.cutting = True
        for up in list(self.relaying):
            up.close()
        for asking in list(self.waiting):
            asking.cancel()

    def in_flight(self) -> int:
        """Calls forwarded and not yet answered whole."""
        return len(self.relaying) + len(self.waiting)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rec = self.recorder
        arrival = rec.now_ns()
        try:  # aiohttp decodes a gzip, deflate, br or zstd body: it goes on decoded
            body = await request.read()
        except web.RequestPayloadError as e:  # one it cannot decode (br without brotli)
            return web.json_response({"error": {
                "message": f"agentbench record: request body unreadable ({e})".strip(),
                "type": "proxy_error"}}, status=400)
        drop = _REQUEST_DROP | ({"authorization"} if self.auth else set())
        if request.headers.get("Content-Encoding", "").lower() in _DECODED:
            drop |= {"content-encoding"}
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in drop)
        if self.auth:  # the upstream URL's user:password, in place of the client's own
            headers["Authorization"] = self.auth
        llm = request.method == "POST" and request.path.endswith(_LLM_PATHS)
        assert self.client is not None
        # an absolute-form target (``GET http://host/v1/...``, as sent to a forward proxy)
        # goes to the upstream like its path: this proxy forwards to one upstream only
        target = request.raw_path if request.raw_path.startswith("/") else str(request.rel_url)
        asking = asyncio.ensure_future(self.client.request(
            request.method, URL(self.upstream.url_for(target), encoded=True),
            headers=headers, data=body or None, allow_redirects=False))
        self.waiting.add(asking)  # a task ``cut`` can end before any answer came
        try:
            up = await asking
        except asyncio.CancelledError:
            if not self.cutting:
                raise
            return web.json_response({"error": {
                "message": f"agentbench record: stopped before upstream {self.upstream.shown} "
                           "answered", "type": "proxy_error"}}, status=502)
        except Exception as e:  # unreachable, or a request aiohttp refuses: one line
            return web.json_response({"error": {
                "message": f"agentbench record: upstream {self.upstream.shown} unreachable "
                           f"({type(e).__name__})", "type": "proxy_error"}}, status=502)
        finally:
            self.waiting.discard(asking)
        resp = web.StreamResponse(status=up.status, reason=up.reason, headers=CIMultiDict(
            (k, v) for k, v in up.headers.items() if k.lower() not in _RESPONSE_DROP))
        encoding = up.headers.get("Content-Encoding")
        tap = ResponseTap(encoding) if llm else None  # what the analysis needs, bounded
        first: int | None = None
        error: str | None = None
        reading = False  # waiting on the upstream (not writing to the client)
        self.relaying.add(up)
        if self.cutting:  # answered as ``cut`` ran: cut too
            up.close()
        try:
            await resp.prepare(request)
            reading = True
            async for chunk in up.content.iter_any():
                reading = False
                if first is None:
                    first = rec.now_ns()
                await resp.write(chunk)
                if tap is not None:
                    tap.add(chunk)
                reading = True
            reading = False
            await resp.write_eof()
        except (TimeoutError, ConnectionError, aiohttp.ClientError) as e:
            error = f"relay stopped: {type(e).__name__}"  # client gone or upstream broke
            if reading and request.transport is not None:
                # the upstream broke: so does the client's answer (ending it here would
                # hand the agent a cut stream as a whole one)
                request.transport.close()
        finally:
            self.relaying.discard(up)
            up.release() if error is None else up.close()
        if tap is not None:
            rec.submit(index=next(rec.ids), path=request.path, body_bytes=body,
                       status=up.status, arrival_ns=arrival, first_byte_ns=first,
                       end_ns=rec.now_ns(), response=tap, encoding=encoding,
                       session_key=request.headers.get(self.cfg.session_header) or None,
                       parent_key=request.headers.get(self.cfg.parent_header) or None,
                       error=error, headers={k: v for k, v in request.headers.items()
                                             if secret_key(k)})
        return resp


@dataclass
class ProxyHandle:
    """A recording proxy running in this event loop: ``url`` (base; the API is under
    /v1), ``recorder`` and ``close()`` (stops serving, writes the trace)."""

    url: str
    recorder: Recorder
    proxy: Proxy
    runner: web.AppRunner

    async def close(self) -> None:
        await self.runner.cleanup()
        await self.proxy.close()
        await self.recorder.close()


async def start_proxy(cfg: RecordConfig) -> ProxyHandle:
    """Start recording in the running loop; returns once it listens (``port=0``: a free
    port)."""
    recorder = Recorder(cfg, time.perf_counter_ns())
    proxy = Proxy(cfg, recorder)
    await proxy.start()
    app = web.Application(client_max_size=1 << 30)  # agent prompts run to megabytes
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    quiet_bad_http()  # a malformed request: one line, not a traceback
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port)
    try:
        await site.start()
    except BaseException as e:
        await runner.cleanup()
        await proxy.close()
        recorder.journal.close()
        # nothing was recorded: a journal left here would refuse the next try's -o
        with contextlib.suppress(OSError):
            store.journal_path(cfg.out).unlink()
        if isinstance(e, OSError):  # the address is taken, unknown, or not ours
            raise InputError(f"cannot listen on {cfg.host}:{cfg.port} "
                             f"({e.strerror or e})", field="listen") from None
        raise
    host, port = runner.addresses[0][:2]
    url_host = f"[{host}]" if ":" in str(host) else host
    return ProxyHandle(f"http://{url_host}:{port}", recorder, proxy, runner)


async def serve(cfg: RecordConfig, on_ready: Callable[[ProxyHandle], None] | None = None
                ) -> ProxyHandle:
    """Record until cancelled (Ctrl-C) or SIGTERM; the trace is written either way."""
    import signal

    handle = await start_proxy(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    if on_ready is not None:
        on_ready(handle)
    try:
        await stop.wait()
    finally:
        # a second SIGTERM ends the streams in flight, as a second Ctrl-C does (was ignored)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, handle.proxy.cut)
        with _cut_on_sigint(loop, handle.proxy):
            if n := handle.proxy.in_flight():  # else a silent wait of up to two minutes
                print(f"agentbench record: stopping: waiting for {n} call"
                      f"{'s' if n > 1 else ''} in flight to end before the trace is written "
                      "(Ctrl-C or SIGTERM again ends them)", file=sys.stderr, flush=True)
            await asyncio.shield(handle.close())
    return handle


@contextlib.contextmanager
def _cut_on_sigint(loop: asyncio.AbstractEventLoop, proxy: Proxy) -> Iterator[None]:
    """While the trace is written, a Ctrl-C ends the relays still in flight (``cut``)
    instead of asyncio's second-Ctrl-C KeyboardInterrupt, which stopped the writing
    half-way (no trace, an unclosed session, a message about an unreadable file)."""
    import signal

    try:
        old = signal.signal(signal.SIGINT,
                            lambda signum, frame: loop.call_soon_threadsafe(proxy.cut))
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def run_record(cfg: RecordConfig, echo: Callable[[str], None]) -> str:
    """``agentbench record``: refuse to overwrite, record until Ctrl-C or SIGTERM, and
    return the line that says what was written."""
    from agentbench.traces.output import check_new

    check_new(cfg.out, store.journal_path(cfg.out),
              hint=" (--rebuild remakes the trace from its journal)")

    def ready(h: ProxyHandle) -> None:
        echo(f"recording: point the agent at {h.url}/v1 (upstream {shown(cfg.upstream)}); "
             f"writing {cfg.out}; Ctrl-C stops")

    async def main() -> None:
        await serve(cfg, ready)

    with contextlib.suppress(KeyboardInterrupt):  # serve()'s finally wrote the trace
        asyncio.run(main())
    return summary(cfg.out)


def summary(out: Path) -> str:
    """One line: calls, sessions and subagents of a written recording."""
    from agentbench.traces.readers import native

    trace = native.read(out)
    meta = store.read_meta(out)
    subs = sum(1 for s in trace.sessions if s.parent_id is not None)
    chained = meta.get("calls_chained_by_previous_response_id")
    warn = (f"; warning: {chained} Responses call(s) sent previous_response_id (the server "
            "kept their context): their hash ids cover their new items only and each starts "
            "a session") if chained else ""
    return (f"wrote {out}: {meta.get('calls_in_trace', 0)} calls in {len(trace.roots())} "
            f"session(s) with {subs} subagent(s) ({meta.get('calls', 0)} recorded; journal "
            f"{store.journal_path(out)}){warn}")
