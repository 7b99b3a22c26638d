"""Real engines under agentbench: helpers shared by the llama.cpp and vLLM tests.

Each engine module runs its shipped scenario (``scenarios/<engine>.yaml``: scaled Weka
sessions with subagents) once, through the same code path as ``agentbench run``, on a
free port, scraping the engine's own ``/metrics`` right before the replay starts and
right after it ends, so the engine's counters over exactly the run's requests can be
compared with what agentbench recorded.
"""

from __future__ import annotations

import contextlib
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

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
    from agentbench.scenario.loading import load_scenario

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
    sc.output.run_id = None  # <name>-<timestamp>: a kept folder never mixes two runs
    metrics_url = ep.url.rstrip("/").removesuffix("/v1") + "/metrics"  # type: ignore[union-attr]
    with serving(sc, path) as adopt, _scrape_after_calibration(metrics_url) as before:
        res = replay_run(sc, progress=False, on_start=adopt)
        after = scrape(metrics_url)
    info = json.loads((res.run_dir / "server.json").read_text())
    reqs = pd.read_parquet(res.run_dir / "requests.parquet")
    run = EngineRun(res.run_dir, reqs, before, after, info)
    (res.run_dir / "integration_figures.json").write_text(json.dumps(figures(run), indent=1))
    return run


def figures(run: EngineRun) -> dict[str, Any]:
    """The run's headline figures, kept beside its results (for notes and reports)."""
    r = run.requests
    ttft = (r["first_token_ns"] - r["sent_ns"]) / 1e6
    share = r["cached_tokens"] / r["prompt_tokens"]
    return {"requests": len(r), "ok": int((r["status"] == "ok").sum()),
            "prompt_tokens": int(r["prompt_tokens"].sum()),
            "cached_tokens": int(r["cached_tokens"].sum()),
            "usage_hit_rate": float(r["cached_tokens"].sum() / r["prompt_tokens"].sum()),
            "ttft_p50_ms": float(ttft.median()),
            "ttft_cold_median_ms": float(ttft[share < 0.1].median()),
            "ttft_cached_median_ms": float(ttft[share > 0.9].median()),
            "cold_requests": int((share < 0.1).sum()),
            "cached_requests": int((share > 0.9).sum()),
            "replay_s": float((r["end_ns"].max() - r["sent_ns"].min()) / 1e9),
            "server_startup_s": run.server_info.get("startup_s"),
            "engine_counter_deltas": {
                name: delta(run.before, run.after, name) for name in (
                    "llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total",
                    "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
                    "vllm:time_to_first_token_seconds_count")
                if any(n == name for n, _ in run.after)}}


def results_dir(tmp_path_factory: Any, name: str) -> Path:
    """``$AGENTBENCH_INTEGRATION_OUT/<name>`` when set (kept), else a pytest temp folder."""
    keep = os.environ.get("AGENTBENCH_INTEGRATION_OUT")
    if keep:
        out = Path(keep) / name
        out.mkdir(parents=True, exist_ok=True)
        return out
    return Path(tmp_path_factory.mktemp(name))


@contextlib.contextmanager
def _scrape_after_calibration(url: str) -> Iterator[Samples]:
    """Yield the samples scraped right before the replay's first request: after the
    replay's start-up calibration requests to a real server (which requests.parquet does
    not hold), or at once when the replay has no such step."""
    from agentbench.transport import opener  # opening an endpoint calibrates it

    before: Samples = {}
    orig = opener.calibrate

    async def calibrate_then_scrape(*args: Any, **kwargs: Any) -> None:
        await orig(*args, **kwargs)
        before.update(scrape(url))  # blocking, but no request of the run is in flight yet

    with mock.patch.object(opener, "calibrate", calibrate_then_scrape):
        yield before
    assert before, "the replay never calibrated: no scrape before the run"


def need(value: Any, why: str) -> Any:
    if value is None:
        pytest.skip(why)
    return value
