"""An OpenAI-compatible server over HTTP+SSE (a remote engine, or the simulator started as
an HTTP server): one connection pool, a pre-encoded body template, prompts as text or
token-id fragments, and the handshakes an open does before the run (preflight,
``ignore_eos`` probe, prompt-count calibration)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from agentbench.errors import InputError
from agentbench.prompts.layout import BlockCache, BodyTemplate, Segment, SessionPrompt
from agentbench.results.schema import RequestRecord
from agentbench.traces.model import Turn
from agentbench.transport import apis
from agentbench.transport.base import Collector, Flavor
from agentbench.transport.http import Target, make_body, redact, send
from agentbench.transport.scrape import BodyTooLarge, http_collector, read_capped

CALIBRATION_SALT = 0xCA11B
#: the path that drops an engine's prefix cache (``reset_cache``; llama.cpp: per slot)
RESET_PATHS = {"vllm": "/reset_prefix_cache", "sglang": "/flush_cache"}
#: tokens the ``--workers auto`` probe asks for
PROBE_TOKENS = 48
#: the probe gives up after this long (a stalled or slow endpoint must not hold the run)
PROBE_TIMEOUT_S = 10.0
_PROBE_SALT = 0xA070
#: the most bytes of a start-up probe's answer held (they are a few hundred bytes)
PROBE_BODY_BYTES = 1 << 20
#: seconds the pre-run request waits for its answer (less when the endpoint's
#: ``timeout_s`` is less)
PREFLIGHT_S = 60.0


def split_base(url: str) -> str:
    u = url.rstrip("/")
    return u[:-3] if u.endswith("/v1") else u


@dataclass
class HttpTransport:
    """One OpenAI-compatible endpoint over HTTP (see :class:`~.base.Transport`)."""

    label: str
    api: str
    base_url: str  # without /v1
    target: Target
    template: BodyTemplate
    http: aiohttp.ClientSession
    metrics_url: str | None
    ignore_eos: bool
    overhead: int = 0
    notes: list[str] = field(default_factory=list)
    #: the HTTP simulator this transport started (closed with it), or None
    sim_handle: Any = None
    #: how the server's cache is reset (``reset_cache``: vllm, sglang, llama.cpp), or None
    reset_kind: str | None = None
    #: whether a request that waited for a free connection is dropped (``hold_unsent``)
    unsent_if: Callable[[], bool] | None = None

    @property
    def flavor(self) -> Flavor:
        return (self.api, self.overhead, None)

    def prompt_builder(self, caches: Mapping[str, Any], salt: int, session_id: str,
                       shared_prefix: int, turns: Sequence[Turn] = ()) -> SessionPrompt:
        return SessionPrompt(caches[self.api], salt, session_id, self.overhead, shared_prefix)

    async def send(self, rec: RequestRecord, prompt: Any, max_tokens: int, session: str,
                   t0_ns: int) -> None:
        body = make_body(self.template.parts(prompt, max_tokens))
        rec.api, rec.secrets = self.api, self.target.secrets
        await send(self.http, self.target, body, session, rec, t0_ns, self.unsent_if)

    def hold_unsent(self, stopped: Callable[[], bool]) -> None:
        self.unsent_if = stopped

    def collector(self) -> Collector | None:
        return None if not self.metrics_url else http_collector(self.http, self.metrics_url,
                                                                 self.label)

    async def stream_rate(self, cache: Any) -> float | None:
        """Token events per second of one stream after its first event (a short request);
        None when the endpoint did not stream enough events to tell."""
        content = cache.content(_PROBE_SALT, [Segment(16, 16)], 0)
        frags = [content + b","] if self.api == "completions" else [content]
        body = make_body(self.template.parts(frags, PROBE_TOKENS))
        rec = RequestRecord(
            request_id=-1, stage="probe", phase="probe", endpoint=self.label, lane=-1,
            tree_id="workers-probe", session_id="workers-probe", relation="root", copy=0,
            turn=0, scheduled_ns=0, expected_input_tokens=16,
            expected_output_tokens=PROBE_TOKENS, potential_cached_tokens=0, api=self.api)
        t0 = time.perf_counter_ns()
        try:
            await asyncio.wait_for(send(self.http, self.target, body, "workers-probe", rec, t0),
                                   PROBE_TIMEOUT_S)
        except TimeoutError:  # a slow stream: the events that came still tell its rate
            pass
        except Exception:  # noqa: BLE001 - a failed probe only means no estimate
            return None
        if not rec.chunks or (rec.error_type is not None and rec.error_type != "cancelled"):
            return None
        ev = apis.read_stream(self.api, rec.chunks, rec.chunk_ns).token_event_ns
        if len(ev) < 8 or ev[-1] <= ev[1]:
            return None
        return (len(ev) - 2) / ((ev[-1] - ev[1]) / 1e9)

    async def reset_cache(self) -> str:
        """``reset_kind``'s reset (the simulator serves vLLM's); one line of what it said."""
        kind = self.reset_kind or ("vllm" if self.sim_handle is not None else None)
        if kind is None:
            raise InputError("no reset_cache set for this endpoint (cold_stages)",
                             where=self.label, field="reset_cache")
        paths = [RESET_PATHS[kind]] if kind != "llama.cpp" else await self._slot_paths()
        said = []
        for path in paths:
            status, raw = await self._call("POST", path)
            if not 200 <= status < 300:
                text = _server_said(raw[:200], self.target.secrets)
                raise InputError(f"{kind} cache reset: POST {path} answered HTTP {status}: "
                                 f"{text}", where=self.label, field="reset_cache")
            said.append(path)
        return f"{kind}: POST {', '.join(said) or '(no slots)'} ok"

    async def _slot_paths(self) -> list[str]:
        status, raw = await self._call("GET", "/slots")
        try:
            slots = json.loads(raw) if status == 200 else None
        except ValueError:
            slots = None
        if not isinstance(slots, list):
            raise InputError(f"llama.cpp cache reset: GET /slots answered HTTP {status} "
                             "(start llama-server with its slots endpoint on)",
                             where=self.label, field="reset_cache")
        ids = [s.get("id") for s in slots if isinstance(s, dict)]
        return [f"/slots/{i}?action=erase" for i in ids if isinstance(i, int)]

    async def _call(self, method: str, path: str) -> tuple[int, bytes]:
        try:
            async with self.http.request(method, self.base_url + path,
                                         headers=dict(self.target.headers),
                                         timeout=aiohttp.ClientTimeout(total=60),
                                         allow_redirects=False) as resp:
                return resp.status, await read_capped(resp, PROBE_BODY_BYTES)
        except (aiohttp.ClientError, TimeoutError) as e:
            msg = redact(str(e) or type(e).__name__, self.target.secrets)
            raise InputError(f"cache reset: {method} {path} failed: {msg}", where=self.label,
                             field="reset_cache") from None

    def opened(self) -> dict[str, Any]:
        return {"label": self.label, "base_url": self.base_url, "ignore_eos": self.ignore_eos,
                "overhead": self.overhead, "notes": list(self.notes)}

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.http.close()
        with contextlib.suppress(Exception):
            self.target.close()  # the streaming reader's idle keep-alive connections
        if self.sim_handle is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.sim_handle.close(), 30)

    # -- the handshakes of an open (``agentbench.transport.opener``) ----------------------

    async def _post(self, body: dict[str, Any], timeout_s: float
                    ) -> tuple[int, bytes]:
        async with self.http.post(self.target.url, data=json.dumps(body).encode(),
                                  headers=dict(self.target.headers),
                                  timeout=aiohttp.ClientTimeout(total=timeout_s),
                                  allow_redirects=False) as resp:
            return resp.status, await read_capped(resp, PROBE_BODY_BYTES)


def connect(label: str, api: str, model: str, base: str, query: str, headers: dict[str, str],
            timeout: aiohttp.ClientTimeout, metrics_url: str | None, max_conn: int,
            secrets: tuple[str, ...], follow_redirects: bool) -> HttpTransport:
    """A transport to ``base``: headers, timeouts and a connection pool (no request sent)."""
    headers.setdefault("Content-Type", "application/json")
    headers.setdefault("Accept", "text/event-stream")
    apis.api_headers(api, headers)
    connector = aiohttp.TCPConnector(limit=max_conn, limit_per_host=max_conn,
                                     ttl_dns_cache=None, enable_cleanup_closed=False)
    http = aiohttp.ClientSession(connector=connector, skip_auto_headers=("Accept-Encoding",))
    target = Target(label, base + apis.path(api) + query, headers, timeout, secrets,
                    follow_redirects)
    from agentbench.prompts.layout import body_template

    return HttpTransport(label=label, api=api, base_url=base, target=target,
                         template=body_template(api, model, {}, False), http=http,
                         metrics_url=metrics_url, ignore_eos=False)


async def calibrate(tr: HttpTransport, model: str, extra: dict[str, Any],
                    cache: BlockCache) -> None:
    """Two small prompts (16 and 48 tokens of block content) tell how the server counts:
    ``prompt_tokens = a x content + b``. With ``a`` = 1 the server counts like the
    prompts are built and ``b`` (template, BOS) is taken off every prompt, so reported
    prompt tokens equal the trace's exactly; otherwise a note says by how much counts will
    differ (set ``prompt.tokenizer`` to the server's tokenizer)."""
    counts = []
    for k in (16, 48):
        content = cache.content(CALIBRATION_SALT, [Segment(k, k)], 0)
        text: str | list[int] = content.decode() if tr.api != "completions" else \
            [int(x) for x in content.split(b",")]
        body = apis.small_body(tr.api, model, extra, text, 1)
        try:
            status, raw = await tr._post(body, 60)
            data = json.loads(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            data = None
        n = apis.prompt_tokens(tr.api, data)
        if n is None:
            tr.notes.append(f"prompt-count calibration: no {apis.usage_name(tr.api)}; "
                            f"template cost assumed {tr.overhead} tokens")
            return
        counts.append(n)
    a = (counts[1] - counts[0]) / 32
    b = counts[0] - 16 * a
    if abs(a - 1) <= 0.01 and b >= 0:
        tr.overhead = round(b)
        tr.notes.append(f"prompt-count calibration: exact, {tr.overhead} template tokens")
    else:
        tr.notes.append(f"prompt-count calibration: the server counts {a:.2f} tokens per "
                        f"prompt token (+{b:.0f}); reported prompt_tokens will differ from "
                        "the trace's; set prompt.tokenizer to the server's tokenizer")


async def check_reachable(tr: HttpTransport, model: str, index: int) -> None:
    """One plain 1-token request before the run: an endpoint nobody answers at, or that
    refuses the key or the model (401, 403, 404), is a one-line error naming the endpoint,
    not a run of failed requests. Other statuses (a 5xx, a 429) do not stop the run: they
    are recorded per request."""
    body = apis.small_body(tr.api, model, {}, "hi", 1)
    where = f"endpoints[{index}]"
    shown = redact(tr.target.url, tr.target.secrets)  # a query may carry the key
    wait = min(PREFLIGHT_S, tr.target.timeout.total or PREFLIGHT_S)
    status = 0
    try:
        async with tr.http.post(tr.target.url, data=json.dumps(body).encode(),
                                headers=dict(tr.target.headers),
                                timeout=aiohttp.ClientTimeout(total=wait),
                                allow_redirects=False) as resp:
            status = resp.status
            try:
                raw = await read_capped(resp, PROBE_BODY_BYTES)
            except BodyTooLarge:
                raw = b"(an answer of more than 1 MiB)"
            text = raw[:300].decode("utf-8", "replace")
    except TimeoutError:  # a listening port that never answers reads "TimeoutError" alone
        said = (f"HTTP {status}, then not its whole body" if status
                else "no answer to a 1-token request")
        raise InputError(f"cannot reach {shown}: {said} within {wait:g} s (a server still "
                         "loading its model, or a host that drops connections?); "
                         "`preflight: false` skips this check",
                         where=where, field="url") from None
    except aiohttp.ClientConnectionError as e:
        msg = redact(str(e) or type(e).__name__, tr.target.secrets)
        raise InputError(f"cannot reach {shown}: {msg}", where=where,
                         field="url") from None
    if status in (401, 403):
        raise InputError(f"{shown} answered HTTP {status} (check api_key_env and "
                         f"headers): {_server_said(text, tr.target.secrets)}", where=where,
                         field="api_key_env") from None
    if status == 404:
        raise InputError(f"{shown} answered HTTP 404 (wrong URL or model?): "
                         f"{_server_said(text, tr.target.secrets)}", where=where,
                         field="model") from None


def _server_said(raw: bytes | str, secrets: Any) -> str:
    """A server's answer in an error: decoded, secrets redacted, whitespace runs as one
    space and control characters escaped (a terminal escape sequence in a body set the
    window title), one line."""
    from agentbench.scenario.yamlfile import one_line

    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return one_line(" ".join(redact(text, secrets).split()), 300)


async def probe_ignore_eos(tr: HttpTransport, model: str, extra: dict[str, Any]) -> bool:
    """Whether the server accepts ``ignore_eos``/``min_tokens`` (a 2xx to a 1-token request)."""
    body = apis.small_body(tr.api, model, extra, "hi", 1, min_tokens=1, ignore_eos=True)
    try:
        status, _ = await tr._post(body, 30)
        return 200 <= status < 300
    except (aiohttp.ClientError, TimeoutError):
        return False
