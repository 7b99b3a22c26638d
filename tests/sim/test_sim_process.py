"""The simulator in its own process (the default): it answers at once, close() stops its
PID, it dies with its parent, and start-up errors are one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import aiohttp
import pytest

from agentbench.scenario.model import SimulatedEndpoint
from agentbench.sim import SimProcess, SimulatorStartError, start_simulator
from tests.helpers import ROOT

pytestmark = pytest.mark.timeout(60)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped yet, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(pid: int, timeout_s: float) -> None:
    """Wait until ``pid`` has exited."""
    async def poll() -> None:
        while alive(pid):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout_s)


def cfg(**kw: object) -> SimulatedEndpoint:
    return SimulatedEndpoint.model_validate({"kind": "simulated", "preset": "instant", **kw})


async def test_default_runs_in_a_child_process_and_close_stops_it() -> None:
    t0 = time.perf_counter()
    h = await asyncio.wait_for(start_simulator(cfg(instances=2)), 30)
    started_s = time.perf_counter() - t0
    assert isinstance(h, SimProcess) and h.pid != os.getpid() and alive(h.pid)
    try:
        async with aiohttp.ClientSession(base_url=h.url) as s:
            async with s.get("/health") as r:  # answering already when start returns
                assert r.status == 200
            body = {"model": "sim", "messages": [{"role": "user", "content": "one two"}],
                    "max_tokens": 3, "ignore_eos": True}
            async with s.post("/v1/chat/completions", json=body) as r:
                usage = (await r.json())["usage"]
        assert usage["completion_tokens"] == 3 and usage["prompt_tokens"] > 0
    finally:
        await asyncio.wait_for(h.close(), 20)
    assert h.proc.returncode == 0  # a clean exit on SIGTERM, not a kill
    assert not alive(h.pid)
    # Start-up is an interpreter start plus imports: well under 2 s on an idle machine;
    # the bound leaves room for a loaded shared CI core.
    assert started_s < 15


async def test_close_with_a_stream_in_flight_ends_it() -> None:
    h = await asyncio.wait_for(start_simulator(cfg(preset="h200-llama3-70b", speedup=1.0)), 30)
    body = {"model": "sim", "messages": [{"role": "user", "content": "go on"}],
            "max_tokens": 100_000, "ignore_eos": True, "stream": True}
    async with aiohttp.ClientSession(base_url=h.url) as s, \
            s.post("/v1/chat/completions", json=body) as r:
        first = await asyncio.wait_for(r.content.readline(), 20)
        assert first.startswith(b"data: ")
        await asyncio.wait_for(h.close(), 20)
        rest = await asyncio.wait_for(r.content.read(), 20)
    assert b"aborted" in rest or rest == b"" or rest.endswith(b"[DONE]\n\n")
    assert not alive(h.pid)


async def test_start_errors_are_one_line() -> None:
    h = await asyncio.wait_for(start_simulator(cfg()), 30)
    try:
        port = int(h.url.rsplit(":", 1)[1])
        with pytest.raises(SimulatorStartError) as busy:
            await asyncio.wait_for(start_simulator(cfg(), port=port), 30)
        msg = busy.value.one_line()
        assert "\n" not in msg and f":{port}" in msg and "address already in use" in msg
    finally:
        await asyncio.wait_for(h.close(), 20)
    with pytest.raises(SimulatorStartError) as bad:
        await asyncio.wait_for(start_simulator(cfg(preset="no-such-preset")), 30)
    assert "\n" not in bad.value.one_line() and "no-such-preset" in bad.value.one_line()


async def test_in_process_mode_exposes_the_cluster() -> None:
    h = await start_simulator(cfg(instances=3), in_process=True)
    try:
        assert len(h.cluster.instances) == 3
        async with aiohttp.ClientSession(base_url=h.url) as s, s.get("/health") as r:
            assert r.status == 200
    finally:
        await asyncio.wait_for(h.close(), 20)


async def test_the_simulator_dies_with_its_parent() -> None:
    """A parent killed with SIGKILL cannot clean up: the child sees its stdin close."""
    script = textwrap.dedent("""
        import asyncio, sys
        from agentbench.scenario.model import SimulatedEndpoint
        from agentbench.sim import start_simulator

        async def main():
            h = await start_simulator(SimulatedEndpoint(kind="simulated", preset="instant"))
            print(h.pid, h.url, flush=True)
            await asyncio.Event().wait()

        asyncio.run(main())
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              cwd=ROOT, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), 30)  # type: ignore[union-attr]
        pid_s, url = line.split()
        child = int(pid_s)
        assert alive(child)
        parent.kill()
        parent.wait(10)
        await gone(child, 20)
        with pytest.raises(aiohttp.ClientError):
            async with aiohttp.ClientSession() as s:
                await s.get(url + "/health", timeout=aiohttp.ClientTimeout(total=2))
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


def sim_children() -> set[int]:
    """PIDs of this process's running simulator children (from /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and \
                b"agentbench.sim.process" in cmd:
            out.add(int(stat.parent.name))
    return out


async def test_replay_against_the_simulator_process(weka_trace, tmp_path):  # type: ignore[no-untyped-def]
    """A bounded replay of real agents: the simulator runs beside the client and is gone
    after the run; the summary is in simulated time and counts the agents the bound cut."""
    from agentbench.metrics import summarize
    from agentbench.replay import run_scenario
    from agentbench.scenario.model import Scenario

    sc = Scenario.model_validate({
        "name": "sim-e2e", "seed": 0, "clock": "wall",
        "endpoints": [{"kind": "simulated", "preset": "h200-llama3-70b", "instances": 2,
                       "router": "session_affinity", "speedup": 50}],
        "trace": {"kind": "file", "source": "unused"},
        "load": {"kind": "lanes", "concurrency": 3},
        "timing": {"time_scale": 0.02, "idle_cap_s": 0.2},
        "limits": {"max_requests": 40, "on_deadline": "cancel", "recycle": False},
        "output": {"dir": str(tmp_path), "run_id": "run"},
        "server_metrics": {"interval_s": 0.2}})
    before = sim_children()
    res = await asyncio.wait_for(run_scenario(sc, trace=weka_trace, progress=False), 120)
    assert sim_children() == before  # the run stopped its simulator
    s = summarize(res.run_dir)
    assert (s["time_base"]["kind"], s["time_base"]["speedup"]) == ("simulated", 50.0)
    o = s["overall"]
    assert o["requests"]["ok"] >= 40 - 3  # at most one request per lane cancelled
    assert o["window_s"] == pytest.approx(o["window_wall_s"] * 50)
    # usage and the simulator's own counters agree across the process boundary (exactly
    # unless a request cancelled at the bound was counted by the server but has no usage)
    usage, server = o["hit_rate"]["usage"]["value"], o["hit_rate"]["prometheus"]["value"]
    if o["requests"]["cancelled"] == 0:
        assert usage == pytest.approx(server)
    assert abs(usage - server) < 0.1
    a = o["agents"]
    assert a["completed"] + a["failed"] + a["cut"] == a["trees"] and a["failed"] == 0
    assert a["cut"] >= 1  # 40 requests end the run with agents still going
