"""Endpoints at run time: URL, headers (API key from its env var, never written), one
aiohttp connection pool each, a pre-encoded body template, and client-side routing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from agentbench.errors import InputError
from agentbench.prompts.layout import (
    BlockCache,
    BodyTemplate,
    Segment,
    body_template,
    chat_overhead,
)
from agentbench.replay.schedule import choice_rng
from agentbench.scenario.secrets import (  # noqa: F401 - re-exported
    HARMLESS_HEADERS,
    MIN_SECRET,
    SECRET_KEY_PARTS,
    expand_env,
    query_of,
    secret_key,
    secrets_of,
    url_userinfo,
    without_query,
)
from agentbench.transport.http import Target

CALIBRATION_SALT = 0xCA11B


@dataclass
class LiveEndpoint:
    """One endpoint while the run goes."""

    label: str
    api: str
    base_url: str  # without /v1
    target: Target
    template: BodyTemplate
    http: aiohttp.ClientSession | None
    metrics_url: str | None
    ignore_eos: bool
    overhead: int = 0  # prompt tokens the server adds (chat template, BOS): cut from content
    inflight: int = 0
    sim_handle: Any = None
    notes: list[str] = field(default_factory=list)
    #: the in-process simulator on the virtual clock (``agentbench.transport.simulated``);
    #: None: HTTP
    transport: Any = None
    retry: Any = None  # the endpoint's retry policy (``agentbench.replay.retry``), or None
    connect_failures: int = 0  # connection errors in a row (connection backoff)
    blocked_until_ns: int = 0  # no request is sent before this (run clock)
    reconnect_ns: int = 0  # how long a refused connection keeps trying (no budget spent)
    #: reclassifies a row before it is written (context overflow, ``replay.overflow``)
    amend: Any = None

    @property
    def sim_block(self) -> int | None:
        """The simulator's block size when prompts go to it as block hashes, else None."""
        return None if self.transport is None else int(self.transport.block_size)


def split_base(url: str) -> str:
    u = url.rstrip("/")
    return u[:-3] if u.endswith("/v1") else u


def api_path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


async def open_endpoint(cfg: Any, index: int, caches: dict[str, BlockCache],
                        now_ns: Callable[[], int] | None = None) -> LiveEndpoint:
    """Start (simulated) or connect to (openai) one endpoint; for a real server, measure
    how it counts prompt tokens (see ``calibrate``). With ``now_ns`` (a virtual-clock run)
    a simulated endpoint runs in this process on that clock."""
    if cfg.kind == "simulated" and now_ns is not None:
        return await _open_in_process(cfg, now_ns)
    handle = None
    if cfg.kind == "simulated":
        try:
            from agentbench.sim import start_simulator
        except ImportError as e:
            raise InputError(f"the serving simulator is not available ({e})",
                             where=f"endpoints[{index}]", field="kind") from None
        handle = await start_simulator(cfg, host="127.0.0.1", port=0)
        base = split_base(str(handle.url))
        label = cfg.name or "sim"
    else:
        bare, _, _ = url_userinfo(cfg.url)
        base = split_base(without_query(bare))
        label = cfg.name or without_query(bare)  # a key in the query stays out of results
    ep = _connect(cfg, base, label)
    ep.sim_handle = handle
    policy = getattr(cfg, "retry", None)
    ep.retry = policy if policy is not None and policy.max_attempts > 1 else None
    ep.reconnect_ns = int(getattr(cfg, "reconnect_s", 0.0) * 1_000_000_000)
    if cfg.kind != "simulated" and cfg.preflight:
        try:
            await check_reachable(ep, cfg.model, index)
        except InputError:
            await close_endpoint(ep)
            raise
    extra = _extra_body(cfg, index)
    want = getattr(cfg, "ignore_eos", True)
    if want is None:
        want = await probe_ignore_eos(ep, cfg.model, extra)
        ep.notes.append(f"ignore_eos probe: {'accepted' if want else 'not accepted'}")
    ep.ignore_eos = bool(want)
    try:
        ep.template = body_template(cfg.api, cfg.model, extra, ep.ignore_eos)
    except ValueError as e:
        raise InputError(str(e), where=f"endpoints[{index}]", field="extra_body") from None
    ep.overhead = chat_overhead() if cfg.api == "chat" else 0
    if cfg.kind != "simulated":
        await calibrate(ep, cfg.model, extra, caches[cfg.api])
    return ep


async def _open_in_process(cfg: Any, now_ns: Callable[[], int]) -> LiveEndpoint:
    from agentbench.transport.simulated import SimTransport

    tr = SimTransport(cfg, now_ns)
    await tr.start()
    label = cfg.name or "sim"
    target = Target(label, "in-process", {}, aiohttp.ClientTimeout())
    return LiveEndpoint(label=label, api=cfg.api, base_url="in-process", target=target,
                        template=body_template(cfg.api, cfg.model, {}, True), http=None,
                        metrics_url=None, ignore_eos=tr.ignore_eos,
                        overhead=chat_overhead() if cfg.api == "chat" else 0,
                        notes=["in-process simulator on the virtual clock"], transport=tr)


def _extra_body(cfg: Any, index: int) -> dict[str, Any]:
    try:
        return dict(expand_env(dict(getattr(cfg, "extra_body", {}) or {}), "extra_body"))
    except InputError as e:
        raise e.located(where=f"endpoints[{index}]") from None


def _connect(cfg: Any, base: str, label: str) -> LiveEndpoint:
    """Headers (API key from its env var), timeouts and a connection pool for ``base``."""
    if cfg.kind == "simulated":
        headers: dict[str, str] = {}
        timeout = aiohttp.ClientTimeout(total=600.0, sock_read=120.0)
        metrics_url: str | None = base + "/metrics"
        max_conn = 0
    else:
        headers = expand_env(dict(cfg.headers), "headers")
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if key:
                headers["Authorization"] = f"Bearer {key}"
        _, user, password = url_userinfo(cfg.url)
        if (user or password) and not any(k.lower() == "authorization" for k in headers):
            import base64

            cred = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode()
            headers["Authorization"] = f"Basic {cred}"  # to the API only, never /metrics
        timeout = aiohttp.ClientTimeout(total=cfg.timeout_s, sock_read=cfg.stall_timeout_s)
        metrics_url = cfg.metrics_url or base + "/metrics"
        max_conn = cfg.max_connections
    headers.setdefault("Content-Type", "application/json")
    headers.setdefault("Accept", "text/event-stream")
    connector = aiohttp.TCPConnector(limit=max_conn, limit_per_host=max_conn,
                                     ttl_dns_cache=None, enable_cleanup_closed=False)
    http = aiohttp.ClientSession(connector=connector, skip_auto_headers=("Accept-Encoding",))
    query = query_of(getattr(cfg, "url", "") or "")  # e.g. ?api-version=... (Azure)
    target = Target(label, base + api_path(cfg.api) + query, headers, timeout, secrets_of(cfg),
                    bool(getattr(cfg, "follow_redirects", False)))
    return LiveEndpoint(label=label, api=cfg.api, base_url=base, target=target,
                        template=body_template(cfg.api, cfg.model, {}, False), http=http,
                        metrics_url=metrics_url, ignore_eos=False)


def _http(ep: LiveEndpoint) -> aiohttp.ClientSession:
    if ep.http is None:
        raise RuntimeError(f"endpoint {ep.label} has no HTTP connection (in-process)")
    return ep.http


def opened(ep: LiveEndpoint) -> dict[str, Any]:
    """What ``open_endpoint`` found out, for ``reconnect`` in another process."""
    return {"label": ep.label, "base_url": ep.base_url, "ignore_eos": ep.ignore_eos,
            "overhead": ep.overhead, "notes": list(ep.notes)}


def reconnect(cfg: Any, index: int, found: dict[str, Any]) -> LiveEndpoint:
    """An endpoint another process opened (started, probed, calibrated), with this
    process's own connection pool: same URL, body template and template-token cut."""
    ep = _connect(cfg, found["base_url"], found["label"])
    ep.ignore_eos = bool(found["ignore_eos"])
    extra = _extra_body(cfg, index)
    try:
        ep.template = body_template(cfg.api, cfg.model, extra, ep.ignore_eos)
    except ValueError as e:
        raise InputError(str(e), where=f"endpoints[{index}]", field="extra_body") from None
    ep.overhead = int(found["overhead"])
    ep.notes = list(found["notes"])
    policy = getattr(cfg, "retry", None)
    ep.retry = policy if policy is not None and policy.max_attempts > 1 else None
    ep.reconnect_ns = int(getattr(cfg, "reconnect_s", 0.0) * 1_000_000_000)
    return ep


async def calibrate(ep: LiveEndpoint, model: str, extra: dict[str, Any],
                    cache: BlockCache) -> None:
    """Two small prompts (16 and 48 tokens of block content) tell how the server counts:
    ``prompt_tokens = a x content + b``. With ``a`` = 1 the server counts like the
    prompts are built and ``b`` (template, BOS) is taken off every prompt, so reported
    prompt tokens equal the trace's exactly; otherwise a note says by how much counts will
    differ (set ``prompt.tokenizer`` to the server's tokenizer)."""
    counts = []
    for k in (16, 48):
        content = cache.content(CALIBRATION_SALT, [Segment(k, k)], 0)
        body: dict[str, Any] = {"model": model, "max_tokens": 1, "stream": False, **extra}
        if ep.api == "chat":
            body["messages"] = [{"role": "user", "content": content.decode()}]
        else:
            body["prompt"] = [int(x) for x in content.split(b",")]
        try:
            async with _http(ep).post(ep.target.url, data=json.dumps(body).encode(),
                                    headers=dict(ep.target.headers),
                                    timeout=aiohttp.ClientTimeout(total=60),
                                allow_redirects=False) as resp:
                data = await resp.json(content_type=None) if resp.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            data = None
        usage = data.get("usage") if isinstance(data, dict) else None
        n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if not isinstance(n, int):
            ep.notes.append(f"prompt-count calibration: no usage.prompt_tokens; template cost "
                            f"assumed {ep.overhead} tokens")
            return
        counts.append(n)
    a = (counts[1] - counts[0]) / 32
    b = counts[0] - 16 * a
    if abs(a - 1) <= 0.01 and b >= 0:
        ep.overhead = round(b)
        ep.notes.append(f"prompt-count calibration: exact, {ep.overhead} template tokens")
    else:
        ep.notes.append(f"prompt-count calibration: the server counts {a:.2f} tokens per "
                        f"prompt token (+{b:.0f}); reported prompt_tokens will differ from "
                        "the trace's; set prompt.tokenizer to the server's tokenizer")


async def check_reachable(ep: LiveEndpoint, model: str, index: int) -> None:
    """One plain 1-token request before the run: an endpoint nobody answers at, or that
    refuses the key or the model (401, 403, 404), is a one-line error naming the endpoint,
    not a run of failed requests. Other statuses (a 5xx, a 429) do not stop the run: they
    are recorded per request."""
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "stream": False}
    if ep.api == "chat":
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    from agentbench.transport.http import redact

    where = f"endpoints[{index}]"
    try:
        async with _http(ep).post(ep.target.url, data=json.dumps(body).encode(),
                                headers=dict(ep.target.headers),
                                timeout=aiohttp.ClientTimeout(total=60),
                                allow_redirects=False) as resp:
            text = (await resp.read())[:300].decode("utf-8", "replace")
            status = resp.status
    except (aiohttp.ClientConnectionError, TimeoutError) as e:
        msg = redact(str(e) or type(e).__name__, ep.target.secrets)
        raise InputError(f"cannot reach {ep.target.url}: {msg}", where=where,
                         field="url") from None
    if status in (401, 403):
        raise InputError(f"{ep.target.url} answered HTTP {status} (check api_key_env and "
                         f"headers): {redact(text, ep.target.secrets).strip()}", where=where,
                         field="api_key_env") from None
    if status == 404:
        raise InputError(f"{ep.target.url} answered HTTP 404 (wrong URL or model?): "
                         f"{redact(text, ep.target.secrets).strip()}", where=where,
                         field="model") from None


async def probe_ignore_eos(ep: LiveEndpoint, model: str, extra: dict[str, Any]) -> bool:
    """Whether the server accepts ``ignore_eos``/``min_tokens`` (a 2xx to a 1-token request)."""
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "min_tokens": 1,
                            "ignore_eos": True, "stream": False, **extra}
    if ep.api == "chat":
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    try:
        async with _http(ep).post(ep.target.url, data=json.dumps(body).encode(),
                                headers=dict(ep.target.headers),
                                timeout=aiohttp.ClientTimeout(total=30),
                                allow_redirects=False) as resp:
            await resp.read()
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError):
        return False


async def close_endpoint(ep: LiveEndpoint) -> None:
    if ep.http is not None:
        with contextlib.suppress(Exception):
            await ep.http.close()
    with contextlib.suppress(Exception):
        ep.target.close()  # the streaming reader's idle keep-alive connections
    if ep.transport is not None:
        await ep.transport.close()
    if ep.sim_handle is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ep.sim_handle.close(), 30)


class Router:
    """Client-side routing across endpoints: round_robin (per request), session_affinity
    (a session tree sticks to the endpoint it got at its start, trees assigned in turn),
    least_loaded (fewest requests in flight), random (seeded)."""

    def __init__(self, policy: str, endpoints: list[LiveEndpoint], seed: int) -> None:
        self.policy = policy
        self.endpoints = endpoints
        self._rr = 0
        self._trees = 0
        self._rng = choice_rng(seed, "routing")

    def tree_endpoint(self, ordinal: int | None = None) -> int:
        """The sticky endpoint of a new tree (used by session_affinity): trees in turn, by
        their ordinal in the run when given (the same in every worker process)."""
        if ordinal is not None:
            return ordinal % len(self.endpoints)
        i = self._trees % len(self.endpoints)
        self._trees += 1
        return i

    def pick(self, sticky: int) -> int:
        n = len(self.endpoints)
        if n == 1:
            return 0
        if self.policy == "session_affinity":
            return sticky
        if self.policy == "round_robin":
            i = self._rr % n
            self._rr += 1
            return i
        if self.policy == "least_loaded":
            start = self._rr % n
            self._rr += 1
            order = [(start + k) % n for k in range(n)]
            return min(order, key=lambda i: self.endpoints[i].inflight)
        if self.policy == "random":
            return int(self._rng.integers(0, n))
        raise ValueError(f"unknown routing policy {self.policy!r}")
