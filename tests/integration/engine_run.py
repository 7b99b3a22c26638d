"""Real engines under agentbench: helpers shared by the llama.cpp and vLLM tests.

Each engine module runs its shipped scenario (``scenarios/<engine>.yaml``: scaled Weka
sessions with subagents) once, through the same code path as ``agentbench run``, on a
free port, scraping the engine's own ``/metrics`` right before the replay starts and
right after it ends, so the engine's counters over exactly the run's requests can be
compared with what agentbench recorded.
"""

from __future__ import annotations

import contextlib
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample of a Prometheus endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


@dataclass
class EngineRun:
    """One replay against a launched engine, with the engine's metrics around it."""

    run_dir: Path
    requests: pd.DataFrame
    before: Samples
    after: Samples
    server_info: dict[str, Any]


def run_scenario_on_port(path: Path, tmp: Path, port: int, default_port: int) -> EngineRun:
    """Load ``path``, move its server and endpoint to ``port``, start the server, replay,
    stop it; the engine's /metrics is scraped just before and just after the replay."""
    import json

    from agentbench.engines import serving
    from agentbench.replay import run as replay_run
    from agentbench.scenario_io import load_scenario

    sc = load_scenario(path)
    old, new = str(default_port), str(port)
    assert sc.server is not None
    cmd = sc.server.command
    sc.server.command = (cmd.replace(old, new) if isinstance(cmd, str)
                         else [a.replace(old, new) for a in cmd])
    sc.server.health_url = sc.server.health_url.replace(old, new)
    ep = sc.endpoints[0]
    ep.url = ep.url.replace(old, new)  # type: ignore[union-attr]
    sc.output.dir = str(tmp)
    sc.output.run_id = "run"
    metrics_url = ep.url.rstrip("/").removesuffix("/v1") + "/metrics"  # type: ignore[union-attr]
    with serving(sc, path) as adopt, _scrape_after_calibration(metrics_url) as before:
        res = replay_run(sc, progress=False, on_start=adopt)
        after = scrape(metrics_url)
    info = json.loads((res.run_dir / "server.json").read_text())
    reqs = pd.read_parquet(res.run_dir / "requests.parquet")
    return EngineRun(res.run_dir, reqs, before, after, info)


@contextlib.contextmanager
def _scrape_after_calibration(url: str) -> Iterator[Samples]:
    """Yield the samples scraped right before the replay's first request: after the
    replay's start-up calibration requests to a real server (which requests.parquet does
    not hold), or at once when the replay has no such step."""
    from agentbench.replay import endpoints

    before: Samples = {}
    orig = getattr(endpoints, "calibrate", None)
    if orig is None:
        before.update(scrape(url))
        yield before
        return

    async def calibrate_then_scrape(*args: Any, **kwargs: Any) -> None:
        await orig(*args, **kwargs)
        before.update(scrape(url))  # blocking, but no request of the run is in flight yet

    with mock.patch.object(endpoints, "calibrate", calibrate_then_scrape):
        yield before
    assert before, "the replay never calibrated: no scrape before the run"


def need(value: Any, why: str) -> Any:
    if value is None:
        pytest.skip(why)
    return value
