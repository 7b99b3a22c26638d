"""``cold_stages``: every endpoint's prefix cache reset before each stage, so each stage
starts cold: the simulator drops its cached blocks (in virtual time, and over HTTP as
vLLM's ``POST /reset_prefix_cache``), a real server is told the way its engine wants
(vLLM, SGLang, llama.cpp's slots), and a server that refuses stops the run in one line."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.scenario.model import Scenario, SimulatedEndpoint
from agentbench.sim.cluster import Cluster
from tests.helpers import free_port

pytestmark = pytest.mark.timeout(120)

SCENARIO = """
name: cold
seed: 1
endpoints: [{ENDPOINT}]
trace: {kind: synth, profile: codex, sessions: 3, transform: {scale: 0.05}}
load: {kind: lanes, concurrency: [1, 1]}
limits: {max_requests: 6, recycle: false}
timing: {time_scale: 0.0}
server_metrics: {enabled: false}
cold_stages: true
"""


def _run(tmp_path: Path, endpoint: str) -> tuple[int, str, dict[str, Any] | None]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    sc = tmp_path / "cold.yaml"
    sc.write_text(SCENARIO.replace("{ENDPOINT}", endpoint))
    res = CliRunner().invoke(app, ["run", str(sc), "--no-progress", "-o", str(tmp_path),
                                   "--run-id", "r"])
    run = tmp_path / "r" / "run.json"
    return res.exit_code, res.output, json.loads(run.read_text()) if run.exists() else None


@pytest.mark.parametrize("preset", ["instant", "scenarios/presets/llama-cpp-tiny.yaml"])
def test_the_simulator_drops_its_cached_blocks(preset: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Paged instances (their GPU tier) and llama.cpp slots (each slot's prompt)."""
    from tests.helpers import ROOT

    monkeypatch.chdir(ROOT)

    async def go() -> tuple[int, int, int]:
        cl = Cluster(SimulatedEndpoint.model_validate({"kind": "simulated",
                                                       "preset": preset}))
        await cl.start()
        try:
            for i in range(3):
                req = cl.make_request(cl.hasher.id_tokens(list(range(i, i + 640))),
                                      max_tokens=2, ignore_eos=True, min_tokens=2,
                                      session=None)
                done = asyncio.Event()
                req.on_progress = lambda r, d=done: d.set() if r.finished_at else None
                cl.submit(req)
                await asyncio.wait_for(done.wait(), 10)
            held, dropped = _held(cl), cl.reset_cache()
            return held, dropped, _held(cl)
        finally:
            await cl.close()

    held, dropped, left = asyncio.run(go())
    assert held > 0 and dropped == held and left == 0


def _held(cl: Cluster) -> int:
    """Cached blocks: the paged tier's, or what the llama.cpp slots and RAM cache hold."""
    out = 0
    for inst in cl.instances:
        slots = getattr(inst, "slots", None)
        if slots is None:
            out += len(inst.gpu)
            continue
        out += sum(s.held.tokens for s in slots) // inst.block_size
        out += 0 if inst.ram is None else inst.ram.tokens // inst.block_size
    return out


def test_virtual_run_records_each_stages_reset(tmp_path: Path) -> None:
    code, out, run = _run(tmp_path, "{kind: simulated, instances: 1, preset: instant}")
    assert code == 0, out
    resets = [st["cache_reset"] for st in run["stages"]]  # type: ignore[index]
    assert len(resets) == 2 and all(r[0].startswith("simulator: ") for r in resets)
    assert resets[1][0] != "simulator: 0 cached blocks dropped"  # stage 1 left blocks


@pytest.fixture
def engine() -> Iterator[tuple[str, list[str]]]:
    """A server with the three engines' reset routes (and /slots), logging each call;
    its chat route answers from a fake server's stream."""
    from agentbench.testing.fakeserver import FakeServer, ServerConfig

    calls: list[str] = []
    fake = FakeServer(ServerConfig())

    async def log(request: web.Request) -> web.Response:
        calls.append(f"{request.method} {request.path_qs}")
        if request.path == "/slots":
            return web.json_response([{"id": 0}, {"id": 1}])
        if request.path == "/flush_cache" and calls.count("POST /flush_cache") > 1:
            return web.Response(status=500, text="flush refused: requests running")
        return web.json_response({})

    a = fake.app()
    for path in ("/reset_prefix_cache", "/flush_cache", "/slots/{id}"):
        a.router.add_post(path, log)
    a.router.add_get("/slots", log)
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(a)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{port}", calls
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)


def test_each_engine_is_reset_its_own_way(tmp_path: Path,
                                          engine: tuple[str, list[str]]) -> None:
    url, calls = engine
    ep = "{kind: openai, url: %s, model: m, ignore_eos: true, reset_cache: %s}"
    code, out, run = _run(tmp_path / "v", ep % (url, "vllm"))
    assert code == 0, out
    assert calls == ["POST /reset_prefix_cache"] * 2
    assert run["stages"][0]["cache_reset"] == ["vllm: POST /reset_prefix_cache ok"]  # type: ignore[index]
    calls.clear()
    code, out, run = _run(tmp_path / "l", ep % (url, "llama.cpp"))
    assert code == 0, out
    assert calls == ["GET /slots", "POST /slots/0?action=erase",
                     "POST /slots/1?action=erase"] * 2
    calls.clear()
    # SGLang refuses the second flush: the run stops there and fails naming why; stage 1
    # and its requests are kept
    code, out, run = _run(tmp_path / "s", ep % (url, "sglang"))
    assert code == 1 and calls == ["POST /flush_cache"] * 2
    assert run is not None and [st["label"] for st in run["stages"]] == ["c=1"]
    why = "sglang cache reset: POST /flush_cache answered HTTP 500: flush refused"
    stopped = run["stopped_reason"]
    assert stopped.startswith("stage 2 (c=1#2) not run: ") and why in stopped
    assert [ln for ln in out.splitlines() if why in ln and ln.startswith("failed: ")]


def test_cold_stages_needs_a_way_to_reset_a_real_server() -> None:
    with pytest.raises(ValueError, match=r"endpoints\[0\] \(openai\) needs reset_cache"):
        Scenario.model_validate({
            "name": "x", "endpoints": [{"kind": "openai", "url": "http://h:1", "model": "m"}],
            "trace": {"kind": "synth", "profile": "codex", "sessions": 1},
            "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 1},
            "cold_stages": True})
