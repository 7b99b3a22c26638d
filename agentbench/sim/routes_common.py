"""What the simulator's HTTP routes share (``agentbench.sim.server`` for chat and
completions, ``agentbench.sim.typed_routes`` for responses and messages): reading a body,
the session key, making a request of the cluster, usage, the words it streams, and serving
a request: submitted, answered whole or streamed, aborted when the client goes away."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from agentbench.sim.cluster import Cluster, SimRejected
from agentbench.sim.engine import SimRequest
from agentbench.sim.prompt import U64
from agentbench.traces.words import VOCAB

SESSION_HEADER = "X-Session-ID"
CLUSTER = web.AppKey("cluster", Cluster)
_NV = len(VOCAB)
#: what a stream or answer says of a request the engine dropped
ABORTED = "request aborted by the engine"


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def error(message: str, status: int = 400, kind: str = "BadRequestError") -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": kind,
                              "param": None, "code": status}, status=status)


def content(value: Any, where: str) -> str:
    """A message's content as text: a string, null, or a list of text parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for p in value:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, str):
                parts.append(p)
            else:
                raise BadRequest(f"{where}: only text content parts are supported")
        return "".join(parts)
    raise BadRequest(f"{where}: content must be a string, null or a list of text parts")


def opt_int(body: dict[str, Any], key: str, minimum: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise BadRequest(f"{key} must be an integer >= {minimum}, got {v!r}")
    return v


async def read_body(request: web.Request, cluster: Cluster) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(f"request body is not valid JSON: {e}") from None
    except RecursionError:  # 100,000 ``[``: valid to the grammar, past the reader's depth
        raise BadRequest("request body is not valid JSON: nested too deep") from None
    except web.RequestPayloadError as e:  # a Content-Encoding its bytes do not decode as
        raise BadRequest(f"request body unreadable: {' '.join(str(e).split())}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != cluster.cfg.model:
        raise BadRequest(f"The model `{model}` does not exist.", 404, "NotFoundError")
    n = body.get("n")
    if n is not None and n != 1:  # null is OpenAI's default: one choice
        raise BadRequest(f"n must be 1 (the simulator serves one choice), got {n!r}")
    return body


def session_of(request: web.Request, body: dict[str, Any]) -> str | None:
    s = request.headers.get(SESSION_HEADER)
    if s:
        return s
    user = body.get("user")
    return user if isinstance(user, str) and user else None


def make(cluster: Cluster, request: web.Request, body: dict[str, Any], tokens: U64,
          max_key: str) -> SimRequest:
    max_tokens = opt_int(body, max_key, 1)
    if max_tokens is None and max_key == "max_completion_tokens":
        max_tokens = opt_int(body, "max_tokens", 1)
    min_tokens = opt_int(body, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise BadRequest(f"min_tokens ({min_tokens}) must be <= max_tokens ({max_tokens})")
    if tokens.size == 0:
        raise BadRequest("prompt is empty")
    return cluster.make_request(tokens, max_tokens=max_tokens,
                                ignore_eos=bool(body.get("ignore_eos", False)),
                                min_tokens=min_tokens, session=session_of(request, body))


def usage_of(req: SimRequest) -> dict[str, Any]:
    return {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens
            + req.generated, "completion_tokens": req.generated,
            "prompt_tokens_details": {"cached_tokens": req.cached_tokens}}


def word(req: SimRequest, i: int) -> str:
    return VOCAB[(req.rid * 7919 + i) % _NV]


async def token_ranges(req: SimRequest, progress: asyncio.Event) -> AsyncIterator[range]:
    """The indices of new output tokens as the engine makes them, until the request ends
    (finished, or aborted: the caller then says so in its API's way)."""
    sent = 0
    while True:
        n = req.generated
        if n > sent:
            yield range(sent, n)
            sent = n
        if req.aborted or (req.finished_at is not None and sent == req.generated):
            return
        if req.generated == sent:
            progress.clear()
            await progress.wait()


def openai_reject(message: str) -> web.Response:
    """An OpenAI-shaped refusal: 500 for a request the engine aborted, else 400."""
    if message == ABORTED:
        return error(message, 500, "InternalServerError")
    return error(message)


async def serve(request: web.Request, cluster: Cluster, req: SimRequest,
                whole: Callable[[SimRequest], web.Response],
                stream: Callable[[web.StreamResponse, SimRequest, asyncio.Event],
                                 Awaitable[None]] | None,
                reject: Callable[[str], web.Response]) -> web.StreamResponse:
    """Submit ``req``; answer with one JSON body (``whole``, once it finished) or a stream
    (``stream`` writes its events; the end of the body follows); ``reject`` answers a
    request the cluster refused or the engine aborted (``ABORTED``). A request still
    running when the answer ends (the client went away) is aborted."""
    progress = asyncio.Event()
    req.on_progress = lambda _r: progress.set()
    try:
        cluster.submit(req)
    except SimRejected as e:
        return reject(str(e))
    try:
        if stream is None:
            while req.finished_at is None and not req.aborted:
                progress.clear()
                await progress.wait()
            return reject(ABORTED) if req.aborted else whole(req)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            await stream(resp, req, progress)
            await resp.write_eof()
        except ConnectionError:  # the client went away mid-stream: a reset, or aiohttp's
            # plain ConnectionError("Connection lost") when it went while a write waited
            pass  # its request is aborted below: nothing to report, no traceback to print
        return resp
    finally:
        if req.finished_at is None:
            cluster.abort(req)
