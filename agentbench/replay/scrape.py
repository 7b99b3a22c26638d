"""Scraping an endpoint's Prometheus ``/metrics`` during the run into
``server_metrics.parquet`` rows, parsed with ``prometheus_client``'s text parser."""

from __future__ import annotations

import asyncio
import contextlib
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


async def scrape_once(http: aiohttp.ClientSession, url: str) -> str | None:
    """The /metrics text, or None when there is none (error status, not reachable)."""
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None
            return await resp.text()
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


async def scrape_loop(fetch: Callable[[], Awaitable[str | None]], endpoint: str,
                      interval_s: float, now_ns: Callable[[], int],
                      sink: Callable[[list[dict[str, Any]]], None],
                      stop: asyncio.Event) -> int:
    """Scrape every ``interval_s`` until ``stop`` is set (and once more then); return the
    number of scrapes. Stops at once when the first scrape finds no /metrics. ``fetch``
    returns the text: ``scrape_once`` over HTTP, or the in-process simulator's own."""
    n = 0
    while True:
        t = now_ns()
        text = await fetch()
        if text is None:
            if n == 0:
                return 0
        else:
            try:
                sink(parse_samples(text, t, endpoint))
                n += 1
            except ValueError:
                if n == 0:
                    return 0
        if stop.is_set():
            return n
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


async def sample_loop(sample: Callable[[], list[tuple[str, dict[str, str], float]]],
                      endpoint: str, interval_s: float, now_ns: Callable[[], int],
                      sink: Callable[[list[dict[str, Any]]], None],
                      stop: asyncio.Event) -> int:
    """``scrape_loop`` for an in-process server that hands its samples over directly
    (the simulator in virtual time: no text to render or parse)."""
    n = 0
    while True:
        t = now_ns()
        sink([{"time_ns": t, "endpoint": endpoint, "name": name, "labels": list(lab.items()),
               "value": v} for name, lab, v in sample()])
        n += 1
        if stop.is_set():
            return n
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
