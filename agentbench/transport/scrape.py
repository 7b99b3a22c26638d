"""Server metrics as rows: an endpoint's Prometheus ``/metrics`` text parsed with
``prometheus_client``'s parser, or the samples an in-process server hands over. The
replay collects them during the run (``agentbench.replay.scrape``) into
``server_metrics.parquet``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families


def parse_samples(text: str, time_ns: int, endpoint: str) -> list[dict[str, Any]]:
    """One row per sample: (time_ns, endpoint, name, labels, value)."""
    rows = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            rows.append({"time_ns": time_ns, "endpoint": endpoint, "name": s.name,
                         "labels": list(s.labels.items()), "value": float(s.value)})
    return rows


#: the most bytes of one /metrics page held (a vLLM page is a few hundred KB)
MAX_METRICS_BYTES = 16 << 20


class BodyTooLarge(aiohttp.ClientPayloadError):
    """An answer past the bytes its reader holds (a payload error: every handler of a bad
    answer handles it)."""


async def read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The body of ``resp``, or ``BodyTooLarge`` past ``cap`` bytes (an endless or runaway
    answer is not held whole)."""
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(1 << 16):
        buf += chunk
        if len(buf) > cap:
            raise BodyTooLarge(f"more than {cap:,} bytes")
    return bytes(buf)


async def scrape_once(http: aiohttp.ClientSession, url: str) -> str | None:
    """The /metrics text, or None when there is none (error status, not reachable, more
    than ``MAX_METRICS_BYTES``)."""
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None
            return (await read_capped(resp, MAX_METRICS_BYTES)).decode("utf-8")
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


Rows = list[dict[str, Any]]


def http_collector(http: aiohttp.ClientSession, url: str, endpoint: str
                   ) -> Callable[[int], Awaitable[Rows | None]]:
    """Rows of one scrape of ``url``'s Prometheus text; None when there is none (an error
    status, not reachable, not Prometheus text)."""
    async def collect(t: int) -> Rows | None:
        text = await scrape_once(http, url)
        if text is None:
            return None
        try:
            return parse_samples(text, t, endpoint)
        except ValueError:
            return None

    return collect

