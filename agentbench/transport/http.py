"""The HTTP hot path: send one pre-built body, stamp each socket read, return the record.

Only timestamps and raw bytes are taken while the stream runs (on
:mod:`agentbench.transport.stream`, an asyncio protocol whose read costs a stamp and an
append); events, tokens and ``usage`` are read afterwards from the stored chunks
(:mod:`agentbench.transport.sse`). Failures are data: every outcome (HTTP error, refused
connection, reset, stall, timeout, cancellation) ends as fields of the record, never as an
exception to the caller, except that a cancellation is re-raised after the record is
complete.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import aiohttp.payload

from agentbench.results import schema as records
from agentbench.results.schema import RequestRecord
from agentbench.transport import pool as connpool
from agentbench.transport import stream

perf_ns = time.perf_counter_ns


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how one endpoint is called."""

    label: str
    url: str
    headers: Mapping[str, str]
    timeout: aiohttp.ClientTimeout
    secrets: tuple[str, ...] = ()
    #: follow 307/308 to the same origin (scheme, host, port) only, up to MAX_REDIRECTS
    follow_redirects: bool = False
    #: keep-alive connections per URL origin (``agentbench.transport.pool``)
    pools: dict[str, connpool.Pool] = field(default_factory=dict, compare=False, repr=False)

    def pool(self, url: str, http: aiohttp.ClientSession | None = None) -> connpool.Pool:
        """The connection pool for ``url`` (its origin), as many connections as the
        endpoint's aiohttp connector allows."""
        p = self.pools.get(url)
        if p is None:
            limit = getattr(getattr(http, "connector", None), "limit", 0) or 0
            p = self.pools[url] = connpool.Pool(url, int(limit))
        return p

    def close(self) -> None:
        """Close the idle keep-alive connections."""
        for p in self.pools.values():
            p.close()


MAX_REDIRECTS = 5
#: the message of a request whose stage ended while it waited for a free connection (an
#: open loop past the client's connections): not sent, so it is not late traffic after
#: the deadline (docs/architecture.md, replay)
NOT_SENT = "cancelled: the stage ended while it waited for a free connection (not sent)"


#: long bodies are written from their parts in groups of this size
BODY_GROUP_BYTES = 256 * 1024


class RequestBody(aiohttp.payload.Payload):
    """A request body written from its parts (template pieces and prompt fragments).

    When its first bytes go to the socket it calls ``stamp`` (the record's ``sent_ns``:
    the request handed to the socket, after any connection set-up). Long bodies are
    written in groups of ``BODY_GROUP_BYTES``: a 142K-token prompt is never joined into one
    0.7 MB buffer, so memory per request in flight stays small."""

    _autoclose = True

    def __init__(self, parts: list[bytes], size: int) -> None:
        super().__init__(parts, content_type="application/json")
        self._size = size
        self.stamp: Callable[[], None] | None = None

    @property
    def parts(self) -> list[bytes]:
        return list(self._value) if not isinstance(self._value, list) else self._value

    @property
    def size(self) -> int:
        return int(self._size or 0)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value).decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"".join(self._value)

    async def write(self, writer: aiohttp.abc.AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: aiohttp.abc.AbstractStreamWriter,
                                content_length: int | None) -> None:
        if self.stamp is not None:
            self.stamp()
        parts, size = self._value, self._size or 0
        if content_length is not None and content_length < size:
            await writer.write(b"".join(parts)[:content_length])
        elif size <= BODY_GROUP_BYTES:
            await writer.write(b"".join(parts))
        else:
            per_group = max(1, BODY_GROUP_BYTES * len(parts) // size)
            for i in range(0, len(parts), per_group):
                await writer.write(b"".join(parts[i:i + per_group]))


def make_body(parts: list[bytes]) -> RequestBody:
    return RequestBody(parts, sum(map(len, parts)))


def same_origin(url: str, location: str | None) -> str | None:
    """``location`` resolved against ``url`` when it stays on the same scheme, host and
    port; None otherwise (credentials never go to another origin)."""
    if not location:
        return None
    from yarl import URL

    here = URL(url)
    there = here.join(URL(location))
    if (there.scheme, there.host, there.port) != (here.scheme, here.host, here.port):
        return None
    return str(there)


def _redirect_refused(location: str, target: Target) -> str:
    if target.follow_redirects:
        return (f"redirect to {location} not followed: another origin, or too many hops "
                "(credentials stay with the endpoint's own origin)")
    return (f"redirect to {location} not followed (set the endpoint url to where the server "
            "lives, or follow_redirects: true for a redirect within the same origin)")


def redact(text: str, secrets: tuple[str, ...], cut: bool = False) -> str:
    """``text`` with every secret replaced by ``<redacted>``, as it is and as JSON spells
    it (``json_spellings``: an error body or a chat stream's error event is kept as the
    JSON the server sent). ``cut``: the text is the start of something longer, so a
    secret may be cut in two at its end: the longest start of a secret that ends the
    text is dropped as well."""
    forms = [f for s in secrets if s for f in json_spellings(s)]
    for f in forms:
        text = text.replace(f, "<redacted>")
    if cut:
        k = max((n for s in forms for n in range(min(len(s) - 1, len(text)), 0, -1)
                 if text.endswith(s[:n])), default=0)
        text = text[:len(text) - k]
    return text


_HEX = re.compile(r"\\u[0-9a-f]{4}")


@functools.lru_cache(maxsize=256)
def json_spellings(secret: str) -> tuple[str, ...]:
    """``secret`` and the ways a JSON string may spell it, longest first: ``"`` and ``\\``
    escaped, non-ASCII as itself or ``\\u00e4`` (either case), ``/`` as ``\\/`` (PHP,
    Java) and ``<>&`` as ``\\u003c`` (Go). A key holding one of these characters, quoted
    in an error's JSON, was kept whole."""
    out = {secret}
    for ascii_only in (True, False):
        j = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]
        forms = {j, j.replace("/", "\\/")}
        forms |= {f.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
                  for f in forms}
        forms |= {_HEX.sub(lambda m: m[0].upper().replace("\\U", "\\u"), f) for f in forms}
        out |= forms
    return tuple(sorted(out, key=len, reverse=True))


async def send(http: aiohttp.ClientSession | None, target: Target,
               body: bytes | RequestBody, tree_id: str, rec: RequestRecord,
               t0_ns: int, unsent_if: Callable[[], bool] | None = None) -> None:
    """POST ``body`` and fill ``rec`` (times relative to ``t0_ns``). ``unsent_if`` is
    asked once the request has its connection: True (its stage ended while it waited for
    one) and it is not sent (``Transport.hold_unsent``).

    The exchange runs on :mod:`agentbench.transport.stream` (a read costs a stamp and an
    append); ``http`` is the endpoint's aiohttp session, whose connection limit the
    streaming pool keeps."""
    headers = {**target.headers, "X-Session-ID": tree_id,
               "X-Request-ID": str(rec.request_id)}
    if isinstance(body, RequestBody):
        parts, size = body.parts, body.size
    else:
        parts, size = [body], len(body)
    tmo = target.timeout
    loop = asyncio.get_running_loop()
    deadline = loop.time() + tmo.total if tmo.total else None
    connect = [x for x in (tmo.connect, tmo.sock_connect) if x]
    resp: stream.Response | None = None
    try:
        rec.sent_ns = perf_ns() - t0_ns  # the attempt; the first write stamps the hand-over
        # 307/308 are followed only with follow_redirects, to the same origin (the body
        # re-sent as it was): never the credentials to wherever a Location points
        url = target.url
        for hop in range(MAX_REDIRECTS + 1):
            pool = target.pool(url, http)
            async with asyncio.timeout_at(deadline):
                conn = await pool.acquire(min(connect) if connect else None)
            if hop == 0 and unsent_if is not None and unsent_if():
                pool.release(conn)  # nothing written: the connection stays good
                rec.end_ns = perf_ns() - t0_ns
                rec.sent_ns = None  # never handed over: no send time, no schedule lag
                rec.status, rec.error_type, rec.error_message = (
                    records.CANCELLED, "cancelled", NOT_SENT)
                return
            resp = conn.begin(t0_ns, rec.api)
            timer = conn.arm(tmo.sock_read, deadline, tmo.total)
            reuse = False
            try:
                head = pool.head(headers, size)
                rec.sent_ns = perf_ns() - t0_ns
                await _write(conn, head, parts, size)
                assert conn.done is not None
                await conn.done
                reuse = True
            finally:
                timer.cancel()
                conn.end(reuse)
            # a stream ended at its last event, its body not (streamtimer.END_GRACE_S): that
            # event's read is the end
            rec.end_ns = perf_ns() - t0_ns if resp.end_ns is None else resp.end_ns
            rec.http_status = status = resp.status
            rec.reads = len(resp.reads)
            if status in (307, 308) and target.follow_redirects and hop < MAX_REDIRECTS:
                nxt = same_origin(url, resp.headers.get("location"))
                if nxt is not None:
                    url = nxt
                    continue
            if status != 200:
                _refused(rec, resp, status, target)
                return
            rec.chunks, rec.chunk_ns = resp.body(partial=resp.end_ns is not None)
            return
    except asyncio.CancelledError:
        rec.end_ns = perf_ns() - t0_ns
        if resp is None:  # still waiting for a connection: never handed over, no send time
            rec.sent_ns = None
        _partial(rec, resp)
        rec.status = records.CANCELLED
        rec.error_type = "cancelled"
        rec.error_message = "cancelled at the deadline"
        raise
    except stream.StreamError as e:
        rec.end_ns = perf_ns() - t0_ns
        _partial(rec, resp)
        _fail(rec, e.kind, str(e), target)
    except TimeoutError:
        rec.end_ns = perf_ns() - t0_ns
        _partial(rec, resp)
        _fail(rec, "timeout", f"request took longer than {tmo.total} s", target)
    except Exception as e:  # any other failure is data too
        rec.end_ns = perf_ns() - t0_ns
        _partial(rec, resp)
        _fail(rec, type(e).__name__, str(e), target)


async def _write(conn: Any, head: bytes, parts: list[bytes], size: int) -> None:
    """The request head and body; a long body in groups of ``BODY_GROUP_BYTES``."""
    if size <= BODY_GROUP_BYTES:
        await conn.write(head + b"".join(parts))
        return
    await conn.write(head)
    per_group = max(1, BODY_GROUP_BYTES * len(parts) // size)
    for i in range(0, len(parts), per_group):
        await conn.write(b"".join(parts[i:i + per_group]))
        conn.last_ns = perf_ns()  # the stall timeout is about reading


def _refused(rec: RequestRecord, resp: stream.Response, status: int, target: Target) -> None:
    """A status other than 200 into the record: the body's start (or the redirect not
    followed) as the message, and the server's Retry-After."""
    raw = b"".join(resp.body(partial=True)[0])  # a chunked body cut at the cap, too
    cut = len(raw) > ERROR_BODY_BYTES
    text = raw[:ERROR_BODY_BYTES].decode("utf-8", "replace")
    if cut:  # a character cut in two is not kept (nor, in _fail, a secret cut in two)
        text = text.rstrip("\ufffd")
    rec.retry_after_s = _retry_after(resp.headers.get("retry-after"))
    if 300 <= status < 400:
        text, cut = _redirect_refused(resp.headers.get("location", "?"), target), False
    _fail(rec, f"http_{status}", text.strip() or resp.reason, target, cut)


def _partial(rec: RequestRecord, resp: stream.Response | None) -> None:
    """What a stream cut short had brought, into the record (its events still count)."""
    if resp is None or not resp.status:
        return
    rec.http_status = resp.status
    rec.reads = len(resp.reads)
    if resp.status == 200 and not rec.chunks:
        rec.chunks, rec.chunk_ns = resp.body(partial=True)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (a number; an HTTP date is not followed), None if absent."""
    if not value:
        return None
    try:
        s = float(value.strip())
    except ValueError:
        return None
    return s if 0 <= s < 86400 else None


#: the most of an error body read for its message, and the stored message's length
ERROR_BODY_BYTES = 64 * 1024
ERROR_MESSAGE_CHARS = 1000


def _fail(rec: RequestRecord, kind: str, message: str, target: Target,
          cut: bool = False) -> None:
    """An error into the record: the message redacted whole, then cut to length (a
    secret near the cut is gone before the cut is made)."""
    rec.status = records.ERROR
    rec.error_type = kind
    rec.error_message = redact(message, target.secrets, cut)[:ERROR_MESSAGE_CHARS]
