"""The simulator's OpenAI-compatible HTTP surface (aiohttp), shaped like vLLM's.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming SSE, one token
per event, or a single JSON body), ``POST /v1/responses`` and ``POST /v1/messages``
(``agentbench.sim.typed_routes``), ``GET /v1/models``, ``GET /health``, ``GET /metrics``,
``POST /reset_prefix_cache`` (as vLLM's: the cached blocks dropped).
``usage`` always carries ``prompt_tokens_details.cached_tokens``. With
``stream_options.include_usage`` both endpoints end the stream with a chunk whose
``choices`` is ``[]`` and which carries ``usage``, then ``data: [DONE]`` (as vLLM does).
``ignore_eos``/``min_tokens``/``max_tokens`` (or ``max_completion_tokens``) set the output
length. The session key for ``session_affinity`` routing is the ``X-Session-ID`` header,
else the body's ``user`` field. Only message contents are tokenized (roles, names and
tool calls are not), which is how ``agentbench.traces.words.chat_prompt_tokens`` counts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agentbench.errors import quiet_bad_http
from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim.cluster import Cluster
from agentbench.sim.engine import SimRequest
from agentbench.sim.errors import SimulatorStartError
from agentbench.sim.metrics import render
from agentbench.sim.routes_common import (
    ABORTED,
    CLUSTER,
    BadRequest,
    content,
    error,
    make,
    openai_reject,
    read_body,
    serve,
    token_ranges,
    usage_of,
    word,
)
from agentbench.sim.typed_routes import add_routes, anthropic_error


async def _run(request: web.Request, cluster: Cluster, body: dict[str, Any], req: SimRequest,
               chat: bool) -> web.StreamResponse:
    created = int(time.time())
    rid = f"{'chatcmpl' if chat else 'cmpl'}-sim{req.rid}"
    obj = "chat.completion.chunk" if chat else "text_completion"

    def whole(r: SimRequest) -> web.Response:
        text = "".join(word(r, i) for i in range(r.generated))
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant",
                                                             "content": text},
                                      "logprobs": None, "finish_reason": r.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None,
                      "finish_reason": r.finish_reason, "stop_reason": None}
        return web.json_response({
            "id": rid, "object": "chat.completion" if chat else "text_completion",
            "created": created, "model": cluster.cfg.model, "choices": [choice],
            "usage": usage_of(r)})

    async def stream(resp: web.StreamResponse, r: SimRequest, progress: asyncio.Event
                     ) -> None:
        opts = body.get("stream_options") or {}
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        model = json.dumps(cluster.cfg.model)
        head = f'data: {{"id":"{rid}","object":"{obj}","created":{created},' \
               f'"model":{model},"choices":[{{"index":0,'
        # vLLM sends the role-only chunk with the first output, not before it.
        pending = (head + '"delta":{"role":"assistant","content":""},"logprobs":null,'
                   '"finish_reason":null}]}\n\n') if chat else ""
        if chat:
            open_, mid = head + '"delta":{"content":"', '"},"logprobs":null,"finish_reason":'
            close = "}]}\n\n"
        else:
            open_, mid = head + '"text":"', '","logprobs":null,"finish_reason":'
            close = ',"stop_reason":null}]}\n\n'
        async for new in token_ranges(r, progress):
            n = new.stop
            last = r.finished_at is not None and n == r.generated
            parts = [pending]
            pending = ""
            for i in new:
                fin = f'"{r.finish_reason}"' if last and i == n - 1 else "null"
                parts.append(open_ + word(r, i) + mid + fin + close)
            await resp.write("".join(parts).encode())
        if r.aborted:
            err = {"object": "error", "message": ABORTED, "type": "InternalServerError",
                   "param": None, "code": 500}
            await resp.write(f"data: {json.dumps({'error': err})}\n\n".encode())
        elif include_usage:
            usage = {"id": rid, "object": obj, "created": created, "model": cluster.cfg.model,
                     "choices": [], "usage": usage_of(r)}
            await resp.write(f"data: {json.dumps(usage)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")

    return await serve(request, cluster, req, whole,
                       stream if body.get("stream", False) else None, openai_reject)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    cluster = request.app[CLUSTER]
    try:
        body = await read_body(request, cluster)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        pairs = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise BadRequest(f"messages[{i}] must be an object")
            role = m.get("role")
            pairs.append((role if isinstance(role, str) else "user",
                          content(m.get("content"), f"messages[{i}].content")))
        tokens = cluster.hasher.chat_tokens(pairs)
        req = make(cluster, request, body, tokens, "max_completion_tokens")
    except BadRequest as e:
        return error(str(e), e.status, e.kind)
    return await _run(request, cluster, body, req, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    cluster = request.app[CLUSTER]
    try:
        body = await read_body(request, cluster)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            tokens = cluster.hasher.text_tokens(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                              for t in prompt):
            tokens = cluster.hasher.id_tokens(prompt)
        else:
            raise BadRequest("prompt must be a string or a list of token ids (one prompt)")
        req = make(cluster, request, body, tokens, "max_tokens")
    except BadRequest as e:
        return error(str(e), e.status, e.kind)
    return await _run(request, cluster, body, req, chat=False)


async def models(request: web.Request) -> web.Response:
    cluster = request.app[CLUSTER]
    return web.json_response({"object": "list", "data": [{
        "id": cluster.cfg.model, "object": "model", "created": cluster.created,
        "owned_by": "agentbench-sim", "root": cluster.preset.name,
        "max_model_len": cluster.max_context_tokens
        or cluster.cache_blocks * cluster.block_size}]})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's ``POST /reset_prefix_cache``: every cached block no request holds dropped."""
    n = request.app[CLUSTER].reset_cache()
    return web.json_response({"blocks_dropped": n})


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    cluster = request.app[CLUSTER]
    return web.Response(text=render(cluster.cfg.model, cluster.instances),
                        content_type="text/plain", charset="utf-8")


@web.middleware
async def _api_errors(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
    """A path no route serves (404) or a method its route does not take (405), answered
    in the API's own error shape (Anthropic's under ``/v1/messages``, else OpenAI's), as
    every other refusal: aiohttp's plain text ``404: Not Found`` is no JSON to a client."""
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as e:
        message = f"{e.reason}: {request.method} {request.path}"
        if request.path.startswith("/v1/messages"):
            resp = anthropic_error(message, e.status, "not_found_error" if e.status == 404
                                   else "invalid_request_error")
        else:
            resp = error(message, e.status,
                         "NotFoundError" if e.status == 404 else "MethodNotAllowedError")
        if "Allow" in e.headers:
            resp.headers["Allow"] = e.headers["Allow"]
        return resp


def make_app(cluster: Cluster) -> web.Application:
    """The aiohttp application serving ``cluster``."""
    app = web.Application(client_max_size=1 << 30, middlewares=[_api_errors])
    app[CLUSTER] = cluster
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    add_routes(app)  # /v1/responses, /v1/messages
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_get("/metrics", metrics)
    return app


@dataclass
class SimHandle:
    """A simulator running in this event loop: ``url`` (base, the API is under /v1),
    ``cluster`` (its state, for tests) and ``close()``."""

    url: str
    cluster: Cluster
    runner: web.AppRunner

    async def close(self) -> None:
        """Stop: in-flight requests end with an error event, then the server and engine stop."""
        self.cluster.abort_all()
        await self.runner.cleanup()
        await self.cluster.close()


async def start_in_process(cfg: SimulatedEndpoint, host: str = "127.0.0.1",
                           port: int = 0) -> SimHandle:
    """Start the simulator in the running event loop and return once it listens; ``port=0``
    picks a free port. ``agentbench.sim.start_simulator(cfg, in_process=True)`` and the
    child process (``agentbench.sim.process``) come here."""
    cluster = Cluster(cfg)
    await cluster.start()
    quiet_bad_http()  # a malformed request: one line, not a traceback
    runner = web.AppRunner(make_app(cluster), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException as e:
        await runner.cleanup()
        await cluster.close()
        if isinstance(e, OSError):  # port in use, address not available
            raise SimulatorStartError(f"failed to start on {host}:{port}: "
                                      f"{' '.join(str(e).split())}") from None
        raise
    bound = runner.addresses[0]
    url_host = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
    return SimHandle(url=f"http://{url_host}:{bound[1]}", cluster=cluster, runner=runner)
