"""A small OpenAI-compatible streaming server with set TTFT and ITL, and faults on demand.

For replay tests (fidelity: known TTFT/ITL; faults: 500, 429, reset mid-stream, stall,
malformed SSE, an error event (also in vLLM's shape), a body that goes on after the
stream's last event) and client benchmarks.
Prompt tokens are counted with ``agentbench.traces.words`` (``chat_prompt_tokens`` for chat,
the id count for completions), so a replay that lays prompts out right sees exactly the
trace's input tokens reported.
Each output token is one synthetic word (one token), ``tokens_per_event`` per SSE event.

Run standalone (prints ``PORT <n>`` once listening)::

    python -m agentbench.testing.fakeserver --port 0 --ttft 0.05 --itl 0.005
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agentbench.testing.shapes import Counts, shape
from agentbench.traces import words as tokenize
from agentbench.transport.streamtimer import END_GRACE_S

#: where the "redirect" fault sends a client (nothing listens there)
REDIRECT_TO = "http://127.0.0.1:9/v1/elsewhere"
FAULTS = ("http500", "http429", "http400", "redirect", "redirect_here", "reset", "stall",
          "malformed", "error_event", "no_done", "no_usage", "bad_usage", "huge_usage",
          "absurd_usage", "endless_line", "endless_stream", "deep_json",
          "surrogate_error", "hang_after_end", "ping_after_end", "tokens_after_end",
          "end_in_text", "vllm_error_event", "error_then_hang")
#: how long ``end_in_text`` pauses after its token: past the client's look at the stream
END_IN_TEXT_PAUSE_S = 2 * END_GRACE_S
#: usage counts of the "huge_usage" (beyond 64-bit integers) and "absurd_usage" faults
HUGE_USAGE, ABSURD_USAGE = 2**70, 10**12


@dataclass
class ServerConfig:
    """Timing and behaviour of the fake server."""

    ttft_s: float = 0.0
    itl_s: float = 0.0
    tokens_per_event: int = 1
    count_prompt: bool = True
    keep_requests: bool = True
    fault: Callable[[int, dict[str, Any]], str | None] | None = None
    stall_s: float = 3600.0
    retry_after_s: float = 1.0  # sent with every 429
    #: counts a chat request's prompt from its message contents (a real server's tokenizer
    #: and template); None: ``agentbench.traces.words.chat_prompt_tokens``
    chat_counter: Callable[[list[str]], int] | None = None


@dataclass
class Received:
    n: int
    path: str
    headers: dict[str, str]
    body: bytes
    prompt_tokens: int
    t_ns: int


@dataclass
class FakeServer:
    cfg: ServerConfig
    received: list[Received] = field(default_factory=list)  # streamed requests
    probes: list[Received] = field(default_factory=list)  # not streamed (start-up probes)
    count: int = 0
    prompt_tokens_total: int = 0
    runner: web.AppRunner | None = None
    url: str = ""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)
        app.router.add_post("/v1/responses", self._handle)
        app.router.add_post("/v1/messages", self._handle)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/models", self._models)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        return self.url

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def serve_forever(self, host: str, port: int) -> None:
        """Listen, print ``PORT <n>`` (what a parent process waits for), serve until
        killed."""
        url = await self.start(host, port)
        print(f"PORT {url.rsplit(':', 1)[1]}", flush=True)
        await asyncio.Event().wait()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        text = ("# TYPE fake_requests_total counter\n"
                f"fake_requests_total {self.count}\n"
                "# TYPE fake_prompt_tokens_total counter\n"
                f"fake_prompt_tokens_total {self.prompt_tokens_total}\n")
        return web.Response(text=text, content_type="text/plain")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        t_recv = time.perf_counter()
        raw = await request.read()
        n = self.count
        self.count += 1
        body = json.loads(raw)
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "body must be an object"}},
                                     status=400)
        prompt = self._prompt_tokens(request.path, body)
        self.prompt_tokens_total += prompt
        if self.cfg.keep_requests:
            (self.received if body.get("stream") else self.probes).append(Received(
                n, request.path, dict(request.headers), raw, prompt, time.perf_counter_ns()))
        fault = self.cfg.fault(n, body) if self.cfg.fault else None
        if (refusal := self._refusal(fault, request.path)) is not None:
            return refusal
        out_n = int(body.get("max_tokens") or body.get("max_output_tokens") or 16)
        wire = shape(request.path)
        counts = _counts(fault, prompt, out_n)
        if not body.get("stream"):
            text = "".join(tokenize.VOCAB[i % 8100] for i in range(out_n))
            return web.json_response(wire.whole(text, counts))
        return await self._stream(request, wire, fault, counts, out_n, n, t_recv)

    def _prompt_tokens(self, path: str, body: dict[str, Any]) -> int:
        """The prompt tokens a request reports: counted (see the module's docstring), or
        1000 without ``count_prompt``."""
        if not self.cfg.count_prompt:
            return 1000
        if not path.endswith("/v1/completions"):  # a message API
            msgs = body.get("input" if path.endswith("/responses") else "messages")
            contents = [str(m.get("content") or "") for m in msgs or []]
            return (self.cfg.chat_counter or tokenize.chat_prompt_tokens)(contents)
        p = body.get("prompt")
        return len(p) if isinstance(p, list) else tokenize.count_tokens(str(p))

    def _refusal(self, fault: str | None, path: str) -> web.Response | None:
        """The answer of a fault that refuses the request (an HTTP error or a redirect);
        None for any other."""
        if fault == "http500":
            return web.json_response({"error": {"message": "internal error"}}, status=500)
        if fault == "http429":
            return web.json_response({"error": {"message": "rate limited"}}, status=429,
                                     headers={"Retry-After": str(self.cfg.retry_after_s)})
        if fault == "http400":
            return web.json_response({"error": {"message": "bad request"}}, status=400)
        if fault == "redirect":  # to another origin: a client must not follow with the body
            return web.Response(status=307, headers={"Location": REDIRECT_TO})
        if fault == "redirect_here":  # within this server: may be followed
            return web.Response(status=307, headers={"Location": path + "?moved=1"})
        return None

    async def _stream(self, request: web.Request, wire: Any, fault: str | None,
                      counts: Counts, out_n: int, n: int, t_recv: float
                      ) -> web.StreamResponse:
        """The streamed answer to request ``n`` (received at ``t_recv``): ``out_n`` tokens
        at the set TTFT and ITL, or what ``fault`` makes of them."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        if fault == "endless_line":  # one SSE line that never ends, as fast as it goes
            await resp.write(wire.line_start())
            while True:
                await resp.write(b"a" * 65536)
        await resp.write(wire.opening(counts))
        if fault == "end_in_text":  # one more token event, whose text ends nothing
            await resp.write(wire.end_in_text())
            await asyncio.sleep(END_IN_TEXT_PAUSE_S)
        sent = 0
        k = 0
        t_first = t_recv + self.cfg.ttft_s
        while sent < out_n or fault == "endless_stream":  # that one: token events forever
            m = self.cfg.tokens_per_event
            if fault != "endless_stream":
                m = min(m, out_n - sent)
            target = t_first + k * self.cfg.itl_s
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if fault == "reset" and sent >= out_n // 2:
                tr = request.transport
                if tr is not None:
                    tr.abort()
                return resp
            if fault == "stall" and sent >= out_n // 2:
                await asyncio.sleep(self.cfg.stall_s)
            if fault == "malformed" and sent >= out_n // 2:
                await resp.write(wire.malformed())
                fault = None
            if fault in ("error_event", "surrogate_error", "vllm_error_event",
                         "error_then_hang") and sent >= out_n // 2:
                # surrogate_error: a message holding a lone surrogate, as JSON can;
                # vllm_error_event: vLLM's ErrorResponse as the event (chat, completions);
                # error_then_hang: the error event, then nothing for stall_s (no end)
                await resp.write(wire.vllm_error() if fault == "vllm_error_event" else
                                 wire.error("engine died \ud800" if fault == "surrogate_error"
                                            else "engine died"))
                with contextlib.suppress(ConnectionError):  # the client may have gone
                    if fault == "error_then_hang":
                        await asyncio.sleep(self.cfg.stall_s)
                    await resp.write_eof()
                return resp
            words = "".join(tokenize.VOCAB[(n * 7 + sent + i) % 8100] for i in range(m))
            last = sent + m >= out_n and fault != "endless_stream"
            # an endless stream goes as fast as it can: 256 events a write
            await resp.write(wire.token(words, last, counts)
                             * (256 if fault == "endless_stream" else 1))
            sent += m
            k += 1
        if fault == "deep_json":  # an event nested past any JSON reader's depth, then the end
            await resp.write(wire.closing(counts, False) + wire.deep() + wire.end(counts))
        else:
            await resp.write(wire.closing(counts, fault != "no_done"))
        if fault in ("hang_after_end", "ping_after_end", "tokens_after_end"):
            with contextlib.suppress(ConnectionError):  # the client may have gone
                await _after_end(resp, wire, fault, counts, self.cfg.stall_s)
                await resp.write_eof()
            return resp
        await resp.write_eof()
        return resp


async def _after_end(resp: web.StreamResponse, wire: Any, fault: str, counts: Counts,
                     stall_s: float) -> None:
    """After the stream's last event, the body goes on: nothing for ``stall_s``
    (``hang_after_end``), a ``: ping`` comment every 0.2 s for as long
    (``ping_after_end``), or five more token events (``tokens_after_end``)."""
    if fault == "tokens_after_end":
        for i in range(5):
            await resp.write(wire.token(f"late{i} ", False, counts))
        return
    t_end = time.perf_counter() + stall_s
    while time.perf_counter() < t_end:
        if fault == "ping_after_end":
            await resp.write(b": ping\n\n")
        await asyncio.sleep(0.2 if fault == "ping_after_end" else t_end - time.perf_counter())


def _counts(fault: str | None, prompt: int, out_n: int) -> Counts:
    """The usage counts (prompt, cached, output) a stream reports, or what a fault makes
    of them (None: no usage)."""
    if fault == "no_usage":
        return None
    cached = prompt + 100 if fault == "bad_usage" else 0  # impossible: more than prompt
    if fault in ("huge_usage", "absurd_usage"):  # absurd: 10**12 for a small prompt
        prompt = out_n = HUGE_USAGE if fault == "huge_usage" else ABSURD_USAGE
    return prompt, cached, out_n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", type=float, default=0.0, help="seconds to the first token")
    ap.add_argument("--itl", type=float, default=0.0, help="seconds between token events")
    ap.add_argument("--tokens-per-event", type=int, default=1)
    ap.add_argument("--no-count-prompt", action="store_true",
                    help="report 1000 prompt tokens instead of counting (cheaper)")
    args = ap.parse_args(argv)
    cfg = ServerConfig(ttft_s=args.ttft, itl_s=args.itl, tokens_per_event=args.tokens_per_event,
                       count_prompt=not args.no_count_prompt, keep_requests=False)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(FakeServer(cfg).serve_forever(args.host, args.port))


if __name__ == "__main__":
    main()
