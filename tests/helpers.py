"""Helpers the tests share, called as functions (fixtures are in the conftest.py files):
paths, a free port, agentbench's fast server in its own process, scenario builders,
hand-built run folders and small trace and document helpers."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from agentbench.scenario.model import Scenario
    from agentbench.traces.model import Trace

#: the repository root (tests/ is one level below it)
ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
SCENARIOS = ROOT / "scenarios"
#: the real traces, beside the repository (tests needing them skip when missing)
SHARED_TRACES = ROOT.parent / "shared" / "traces"


# ---- ports and servers ------------------------------------------------------------------

def free_port() -> int:
    """A loopback port free right now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve an aiohttp app on a free local port: (its runner, for ``cleanup``; its base
    URL)."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    """``serve_app`` for the length of a ``with``: its base URL."""
    runner, url = await serve_app(app)
    try:
        yield url
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def fastserver(*args: str) -> Iterator[str]:
    """``python -m agentbench.testing.fastserver --port 0 ARGS`` in its own process; yields
    its URL once it listens (it prints ``PORT n``), terminates it on exit."""
    proc = subprocess.Popen([sys.executable, "-m", "agentbench.testing.fastserver",
                             "--port", "0", *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), f"fast server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def serve_sim(*args: str) -> Iterator[str]:
    """``agentbench serve-sim ARGS`` on a free port in its own process; yields its URL once
    it accepts connections, terminates it on exit."""
    import time

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agentbench.cli", "serve-sim", "--port",
                             str(port), *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not accepts(port):
            assert proc.poll() is None and time.monotonic() < deadline, "serve-sim not up"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def accepts(port: int) -> bool:
    """Whether something on this host accepts a connection at ``port`` now."""
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# ---- scenarios --------------------------------------------------------------------------

def openai_scenario(urls: str | Sequence[str], out: Path | str, *, name: str = "t",
                    concurrency: int = 1, run_id: str = "run", named: bool = True,
                    endpoint: Mapping[str, Any] | None = None, **sections: Any) -> Scenario:
    """A scenario replaying a trace given to ``run_scenario`` against OpenAI endpoints at
    ``urls`` (model ``m``, ``ignore_eos``; named ``ep0``, ``ep1``... when ``named``, with
    the keys of ``endpoint`` added to each): lanes at ``concurrency``, no think time, no
    recycling, results in ``out/run_id``, no server-metrics scraping. Each of ``sections``
    (``load=``, ``limits=``, ``server_metrics=``...) replaces that section whole."""
    from agentbench.scenario.model import Scenario

    urls = [urls] if isinstance(urls, str) else list(urls)
    data: dict[str, Any] = {
        "name": name,
        "endpoints": [{"kind": "openai", **({"name": f"ep{i}"} if named else {}), "url": u,
                       "model": "m", "ignore_eos": True, **(endpoint or {})}
                      for i, u in enumerate(urls)],
        "trace": {"kind": "file", "source": "unused"},
        "load": {"kind": "lanes", "concurrency": concurrency},
        "timing": {"time_scale": 0.0},
        "limits": {"recycle": False},
        "output": {"dir": str(out), "run_id": run_id},
        "server_metrics": {"enabled": False},
    }
    data.update(sections)
    return Scenario.model_validate(data)


def write_scenario(path: Path, url: str, out: Path, weka_dir: Path, extra: str = "") -> Path:
    """A scenario file for ``agentbench run``: two Weka sessions on 2 lanes against ``url``,
    results in ``out/r``; ``extra``: more top-level YAML."""
    path.write_text(f"""
name: cli-test
endpoints:
  - kind: openai
    url: {url}
    model: m
    ignore_eos: null
trace:
  kind: file
  source: {weka_dir}
  format: weka
  filters: {{max_sessions: 2}}
load: {{kind: lanes, concurrency: 2}}
timing: {{time_scale: 0.0}}
output: {{dir: {out}, run_id: r}}
{extra}
""")
    return path



def run_and_report(sc: Path, run_dir: Path) -> tuple[list[Path], str]:
    """``agentbench run`` a scenario file whose run lands in ``run_dir``, then ``agentbench
    report`` it (both must exit 0): every file of the run folder, and the terminal output
    of both."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["run", str(sc), "--no-progress"])
    assert res.exit_code == 0, res.output
    rep = runner.invoke(app, ["report", str(run_dir)])
    assert rep.exit_code == 0, rep.output
    return [f for f in run_dir.rglob("*") if f.is_file()], res.output + rep.output

# ---- hand-built run folders -------------------------------------------------------------

MS = 1_000_000  # ns
#: $3.6/GPU-h x 2 GPUs = $0.002 per second of window
HARDWARE = {"gpus": 2, "gpu_hour_usd": 3.6}
PRICES = {"input_per_mtok": 3.0, "cached_input_per_mtok": 0.3, "output_per_mtok": 15.0}


def hand_scenario(name: str, endpoints: list[dict[str, Any]] | None = None, *,
                  time_scale: float | None = None, prices: Mapping[str, Any] | None = None,
                  **sections: Any) -> dict[str, Any]:
    """The scenario a hand-built run's run.json holds: ``endpoints`` and
    ``timing.time_scale`` when given, HARDWARE, PRICES with ``prices`` over them, and any
    other ``sections``."""
    doc: dict[str, Any] = {"name": name}
    if endpoints is not None:
        doc["endpoints"] = endpoints
    if time_scale is not None:
        doc["timing"] = {"time_scale": time_scale}
    doc.update(hardware=dict(HARDWARE), prices={**PRICES, **(prices or {})}, **sections)
    return doc


def req(**kw: Any) -> dict[str, Any]:
    """A requests.parquet row: a measured ``ok`` request with every stamp missing, ``kw``
    over it."""
    base: dict[str, Any] = {
        "request_id": 0, "stage": "c=1", "phase": "measure", "endpoint": "ep", "lane": 0,
        "tree_id": "t#0", "session_id": "t", "relation": "root", "copy": 0, "turn": 0,
        "scheduled_ns": 0, "sent_ns": None, "first_token_ns": None, "last_token_ns": None,
        "end_ns": None, "token_events": None, "token_event_ns": None,
        "token_event_tokens": None, "prompt_tokens": None, "completion_tokens": None,
        "cached_tokens": None, "expected_input_tokens": 0, "expected_output_tokens": 0,
        "potential_cached_tokens": 0, "status": "ok", "http_status": 200,
        "error_type": None, "error_message": None,
    }
    base.update(kw)
    return base


def sess(**kw: Any) -> dict[str, Any]:
    """A sessions.parquet row: a one-turn root session, ``kw`` over it."""
    base: dict[str, Any] = {
        "stage": "c=1", "phase": "measure", "tree_id": "t#0", "session_id": "t",
        "parent_id": None, "relation": "root", "lane": 0, "copy": 0, "endpoint": "ep",
        "turns_planned": 1, "turns_done": 1, "start_ns": None, "end_ns": None,
        "makespan_ns": None, "llm_wait_ns": None, "input_tokens": 0, "output_tokens": 0,
        "status": "ok",
    }
    base.update(kw)
    return base


def write_run(d: Path, requests: list[dict[str, Any]], sessions: Sequence[dict[str, Any]] = (),
              server: Sequence[dict[str, Any]] = (), scenario: dict[str, Any] | None = None
              ) -> Path:
    """A results folder of these rows, its run.json holding ``scenario``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agentbench.results import schema as R

    d.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(requests):
        r.setdefault("request_id", i)
    pq.write_table(pa.Table.from_pylist(requests, schema=R.REQUESTS_SCHEMA), d / R.REQUESTS_FILE)
    pq.write_table(pa.Table.from_pylist(list(sessions), schema=R.SESSIONS_SCHEMA),
                   d / R.SESSIONS_FILE)
    if server:
        pq.write_table(pa.Table.from_pylist(list(server), schema=R.SERVER_METRICS_SCHEMA),
                       d / R.SERVER_METRICS_FILE)
    (d / R.RUN_FILE).write_text(json.dumps({"scenario": scenario or {"name": "hand"}}))
    return d


# ---- traces and documents ---------------------------------------------------------------

#: Weka trees with joins (3 children), a background subagent, and a small one
WEKA_TREES = ("trace_0010", "trace_0004", "trace_0291")


def small_outputs(trace: Trace, roots: tuple[str, ...], out_tokens: int = 4,
                  scale: float = 1.0) -> Trace:
    """The chosen trees, outputs capped and contexts scaled down (prefix structure kept by
    ``transform.scale``) so the test stays fast; links and order are the trace's."""

    from agentbench.traces.model import Trace
    from agentbench.traces.transform import scale as scale_trace

    keep = [s for s in trace.sessions if s.session_id.split("/")[0] in roots]
    trace = scale_trace(Trace(keep, name="weka-subset"), scale)
    keep = trace.sessions
    sessions = [dataclasses.replace(s, turns=[dataclasses.replace(
        t, output_tokens=min(t.output_tokens, out_tokens)) for t in s.turns]) for s in keep]
    return Trace(sessions, name="weka-subset")


def read_text(name: str, text: str | bytes, fmt: str, **options: Any) -> Any:
    """``read_trace`` of ``text`` written to a file called ``name`` in a fresh folder."""
    from agentbench.traces.readers import read_trace

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / name
        if isinstance(text, bytes):
            f.write_bytes(text)
        else:
            f.write_text(text)
        return read_trace(f, format=fmt, **options)


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def key_paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a JSON/YAML document."""
    out = [path] if path else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += key_paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += key_paths(v, (*path, i))
    return out


@contextlib.contextmanager
def local_ray_cluster(nodes: int) -> Iterator[Any]:
    """A Ray cluster of ``nodes`` one-CPU nodes on this machine (``ray.cluster_utils``),
    shut down (with this process's Ray connection) on exit."""
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(nodes - 1):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
