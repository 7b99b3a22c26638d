"""Opening an endpoint of the scenario as a transport: the one place that asks which kind
of endpoint it is (docs/architecture.md). A simulated endpoint runs in this process on the
virtual clock when the run has one, else as an HTTP server this transport starts; an
``openai`` endpoint is a remote server, checked (preflight), probed (``ignore_eos``) and
calibrated (how it counts prompt tokens) before the run."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from agentbench.errors import InputError
from agentbench.prompts.layout import MESSAGE_APIS, BlockCache, body_template, chat_overhead
from agentbench.scenario.endpoints import header_problem
from agentbench.scenario.secrets import (
    basic_credentials,
    expand_env,
    query_of,
    secrets_of,
    url_userinfo,
    without_query,
)
from agentbench.transport.apis import auth_headers
from agentbench.transport.base import Transport
from agentbench.transport.openai_http import (
    HttpTransport,
    calibrate,
    check_reachable,
    connect,
    probe_ignore_eos,
    split_base,
)


async def open_transport(cfg: Any, index: int, caches: Mapping[str, BlockCache],
                         now_ns: Callable[[], int] | None = None) -> Transport:
    """Start (simulated) or connect to (openai) one endpoint; for a real server, measure
    how it counts prompt tokens (``calibrate``). With ``now_ns`` (a virtual-clock run) a
    simulated endpoint runs in this process on that clock."""
    if cfg.kind == "simulated" and now_ns is not None:
        from agentbench.transport.simulated import SimTransport

        sim = SimTransport(cfg, now_ns)
        await sim.start()
        return sim
    extra = _extra_body(cfg, index)  # an unset ${NAME} is refused before anything opens
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
    tr = _connect(cfg, base, label, index)
    tr.sim_handle = handle
    tr.reset_kind = getattr(cfg, "reset_cache", None)
    try:
        await _handshakes(tr, cfg, index, extra, caches)
    except BaseException:
        await tr.close()  # its connection pool (and simulator), quietly
        raise
    return tr


async def _handshakes(tr: HttpTransport, cfg: Any, index: int, extra: dict[str, Any],
                      caches: Mapping[str, BlockCache]) -> None:
    """The pre-run check, the ``ignore_eos`` probe, the body template and the
    prompt-count calibration of an opened HTTP endpoint."""
    if cfg.kind != "simulated" and cfg.preflight:
        await check_reachable(tr, cfg.model, index)
    want = getattr(cfg, "ignore_eos", True)
    if want is None:
        want = await probe_ignore_eos(tr, cfg.model, extra)
        tr.notes.append(f"ignore_eos probe: {'accepted' if want else 'not accepted'}")
    tr.ignore_eos = bool(want)
    tr.template = _template(cfg, index, extra, tr.ignore_eos)
    tr.overhead = chat_overhead() if cfg.api in MESSAGE_APIS else 0
    if cfg.kind != "simulated":
        await calibrate(tr, cfg.model, extra, caches[cfg.api])


def reopen_transport(cfg: Any, index: int, found: dict[str, Any]) -> Transport:
    """An endpoint another process opened (``Transport.opened``: started, probed,
    calibrated), with this process's own connection pool: same URL, body template and
    template-token cut."""
    tr = _connect(cfg, found["base_url"], found["label"], index)
    tr.ignore_eos = bool(found["ignore_eos"])
    tr.template = _template(cfg, index, _extra_body(cfg, index), tr.ignore_eos)
    tr.overhead = int(found["overhead"])
    tr.notes = list(found["notes"])
    return tr


def _template(cfg: Any, index: int, extra: dict[str, Any], ignore_eos: bool) -> Any:
    try:
        return body_template(cfg.api, cfg.model, extra, ignore_eos)
    except ValueError as e:
        raise InputError(str(e), where=f"endpoints[{index}]", field="extra_body") from None


def _extra_body(cfg: Any, index: int) -> dict[str, Any]:
    return _expanded(cfg, "extra_body", index)


def _expanded(cfg: Any, key: str, index: int) -> dict[str, Any]:
    """``cfg``'s ``key`` (headers, extra_body) with its ``${NAME}`` markers expanded; one
    not set is an error naming the endpoint and the key."""
    try:
        return dict(expand_env(dict(getattr(cfg, key, {}) or {}), key))
    except InputError as e:
        raise e.located(where=f"endpoints[{index}]") from None


def _connect(cfg: Any, base: str, label: str, index: int) -> HttpTransport:
    """Headers (API key from its env var), timeouts and a connection pool for ``base``
    (endpoint ``index``)."""
    if cfg.kind == "simulated":
        headers: dict[str, str] = {}
        timeout = aiohttp.ClientTimeout(total=600.0, sock_read=120.0)
        metrics_url: str | None = base + "/metrics"
        max_conn = 0
    else:
        headers = _expanded(cfg, "headers", index)
        for name, value in headers.items():  # a ${NAME} value checked as it is sent
            problem = header_problem(name, value)
            if problem:
                raise InputError(problem, where=f"endpoints[{index}]", field=f"headers.{name}")
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if key:
                if header_problem("k", key):
                    raise InputError(f"environment variable {cfg.api_key_env} holds a control "
                                     "character (a line break, NUL, ...), which an HTTP "
                                     "header cannot send", where=f"endpoints[{index}]",
                                     field="api_key_env")
                auth_headers(cfg.api, key, headers)
        _, user, password = url_userinfo(cfg.url)
        if (user or password) and not any(k.lower() == "authorization" for k in headers):
            # to the API only, never /metrics
            headers["Authorization"] = basic_credentials(user, password)
        timeout = aiohttp.ClientTimeout(total=cfg.timeout_s, sock_read=cfg.stall_timeout_s)
        metrics_url = cfg.metrics_url or base + "/metrics"
        max_conn = cfg.max_connections
    query = query_of(getattr(cfg, "url", "") or "")  # e.g. ?api-version=... (Azure)
    return connect(label, cfg.api, cfg.model, base, query, headers, timeout, metrics_url,
                   max_conn, secrets_of(cfg), bool(getattr(cfg, "follow_redirects", False)))
