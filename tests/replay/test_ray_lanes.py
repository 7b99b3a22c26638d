"""Load from Ray actors on several nodes (``agentbench run --ray`` for a variant that
measures an endpoint; ``agentbench.replay.raylanes``), on a local three-node Ray cluster
against agentbench's fast server: the same request set as one process, clock offsets
recorded and within their bound, every row on one time base, a verdict per node, and a
node lost mid-run handled (its finished rows kept, the run read and reported)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbench.errors import InputError
from agentbench.replay.raylanes import RayLanes, plan_nodes
from tests.helpers import fastserver, local_ray_cluster

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'agentbench[ray]')")

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("ray")]

#: every tree of the trace once (no budget, no recycling): the request set is the trace's
SCENARIO = """
name: lanes
seed: 5
endpoints: [{{kind: openai, url: '{url}', model: m, ignore_eos: true}}]
trace: {{kind: synth, profile: codex, sessions: 9, transform: {{scale: 0.05}}}}
load: {{kind: lanes, concurrency: 6}}
timing: {{time_scale: 0.0, idle_cap_s: null}}
limits: {{recycle: false}}
output: {{dir: out}}
server_metrics: {{enabled: false}}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with local_ray_cluster(3) as c:
        yield c


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with fastserver("--tokens", "16", "--per-event", "--step", "0.002") as url:
        yield url


def _run(folder: Path, text: str, **kw: Any) -> Any:
    from agentbench.experiment import run_experiment

    folder.mkdir()
    (folder / "s.yaml").write_text(text)
    here = Path.cwd()
    os.chdir(folder)
    try:
        run = run_experiment(folder / "s.yaml", **kw).runs[0]
        run.run_dir = folder / run.run_dir
        return run
    finally:
        os.chdir(here)


def _requests(run: Any) -> Any:
    import agentbench

    return agentbench.load(run.run_dir).requests


def _key(df: Any) -> Counter[tuple[Any, ...]]:
    cols = ["session_id", "turn", "copy", "prompt_tokens", "expected_input_tokens",
            "expected_output_tokens", "potential_cached_tokens", "status"]
    return Counter(map(tuple, df[cols].itertuples(index=False)))


def test_lanes_on_three_nodes_send_what_one_process_sends(cluster: Any, server: str,
                                                          tmp_path: Path) -> None:
    text = SCENARIO.format(url=server)
    local = _run(tmp_path / "local", text)
    remote = _run(tmp_path / "ray", text, ray=cluster.address)
    one, many = _requests(local), _requests(remote)
    assert len(many) == len(one) > 50
    assert _key(many) == _key(one)
    assert many["request_id"].is_unique
    info = json.loads((remote.run_dir / "run.json").read_text())
    placed = info["ray"]
    assert info["workers"] == 3 and len({w["node"] for w in placed["workers"]}) == 3
    assert placed["lost"] == []
    assert info["requests_written"] == len(many)
    # every worker sent requests (request id w, w + 3, ...), on one time base: each row
    # inside its stage's window as the driver measured it
    assert set(many["request_id"] % 3) == {0, 1, 2}
    st = info["stages"][0]
    assert (many["sent_ns"] >= st["start_ns"]).all()
    assert (many["end_ns"] <= st["end_ns"]).all()
    # one host, one CLOCK_MONOTONIC: the true offset is 0, so the measured one is within
    # half its round trip (a wrong sign, clock or midpoint breaks this)
    for w in placed["workers"]:
        assert 0 < w["clock_rtt_ns"] < 1_000_000_000
        assert abs(w["clock_offset_ns"]) <= w["clock_rtt_ns"] // 2 + 1
    verdicts = remote.summary["client_saturated_by_node"]
    assert len(verdicts) == 3
    assert all(v is not None and v["figures"] for v in verdicts.values())
    assert sum(f["requests"] for v in verdicts.values() for f in v["figures"].values()) == \
        remote.summary["client_saturated"]["figures"][info["stages"][0]["label"]]["requests"]


def test_the_request_budget_is_sent_exactly(cluster: Any, server: str,
                                            tmp_path: Path) -> None:
    text = SCENARIO.format(url=server).replace("recycle: false",
                                               "recycle: true, max_requests: 157")
    df = _requests(_run(tmp_path / "budget", text, ray=cluster.address))
    assert len(df) == 157 and df["request_id"].is_unique
    assert (df["status"] == "ok").all()


def test_leases_share_out_the_budget_and_end_it() -> None:
    from agentbench.replay.raynode import LEASE_MAX, Coordinator

    c = Coordinator(4, True, 2)
    got = []
    while (n := c.lease(1000))[0]:
        got.append(n)
    assert sum(k for k, _ in got) == 1000
    assert got[0] == (LEASE_MAX, False) and got[-1] == (1, True)
    assert [last for _, last in got].count(True) == 1
    assert c.lease(1000) == (0, True)
    c.new_stage()
    assert c.lease(3) == (1, False)


def test_a_node_lost_mid_run_keeps_its_rows(cluster: Any, tmp_path: Path) -> None:
    # slow enough that the node goes while its lanes have work: the run takes about 18 s
    # and the node goes about 5 s in (at 0.02 s a token the run took 4.5 s and the node
    # went at 4.4 s; after other tests, on a loaded host, the run ended first)
    with fastserver("--tokens", "64", "--per-event", "--step", "0.06") as url:
        text = SCENARIO.format(url=url).replace("recycle: false", "recycle: true, "
                                                "max_requests: 80")
        # this process joins Ray before the node to lose exists, so that its connection
        # cannot rest on that node's raylet (Ray ends a driver whose raylet goes). Once,
        # in a full parallel run, the pytest worker died in the test after this one; the
        # cause is not confirmed (a driver joined here took the head's raylet each time
        # it was looked at)
        import ray as ray_mod

        if not ray_mod.is_initialized():
            ray_mod.init(address=cluster.address)
        extra = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        out: dict[str, Any] = {}

        def go() -> None:
            try:
                out["run"] = _run(tmp_path / "kill", text, ray=cluster.address)
            except BaseException as e:  # noqa: BLE001 - reported below
                out["error"] = e

        t = threading.Thread(target=go)
        t.start()
        parts = tmp_path / "kill" / "out"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until each of the 4 workers wrote a row
            spools = list(parts.glob("*/workers/w*/requests.parquet*"))
            if len(spools) >= 4:
                break
            time.sleep(0.2)
        time.sleep(1.5)
        cluster.remove_node(extra)
        t.join(240)
    assert not t.is_alive()
    assert "error" not in out, out.get("error")
    run = out["run"]
    info = json.loads((run.run_dir / "run.json").read_text())
    assert info["status"] == "completed"
    (lost,) = info["ray"]["lost"]
    assert lost["node"] == extra.node_id
    # the tree sequence and the budget stay on the driver's node, never on one lost
    assert info["ray"]["coordinator_node"] == cluster.head_node.node_id
    assert lost["at_s"] > 0 and lost["requests_cut"] >= 0
    df = _requests(run)
    assert df["request_id"].is_unique
    w = lost["worker"]
    assert (df["request_id"] % 4 == w).sum() > 0  # its finished rows were kept
    assert len(df) == info["requests_written"]
    # the run still reads and reports
    from typer.testing import CliRunner

    from agentbench.cli import app

    res = CliRunner().invoke(app, ["report", str(run.run_dir), "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "report.html").stat().st_size > 10_000


def test_workers_are_spread_node_by_node_within_cpus_and_lanes() -> None:
    nodes = [{"NodeID": "a", "Alive": True, "Resources": {"CPU": 4.0}},
             {"NodeID": "b", "Alive": True, "Resources": {"CPU": 1.0}},
             {"NodeID": "c", "Alive": False, "Resources": {"CPU": 8.0}},
             {"NodeID": "d", "Alive": True, "Resources": {}}]
    assert plan_nodes(nodes, 2, None) == ["a", "b", "a"]
    assert plan_nodes(nodes, 3, 2) == ["a", "b"]
    assert plan_nodes(nodes, 1, None) == ["a", "b"]
    assert plan_nodes(nodes[2:], 1, None) == []
    assert plan_nodes(nodes, 10**20, None) == ["a", "b", "a", "a", "a"]  # at once


def test_a_ray_workers_part_lives_as_long_as_its_driver() -> None:
    import socket
    import subprocess
    import sys

    from agentbench.results.spool import writer_alive

    here = {"hostname": socket.gethostname()}
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    part = {"pid": 1, "status": "running", "host": {"hostname": "gpu-node-7"}}
    assert writer_alive(part)  # another host's process: not ours to judge
    part["owner"] = {"pid": int(gone.stdout), "host": here}
    assert not writer_alive(part)  # its driver is gone, so Ray ended it
    part["owner"] = {"pid": os.getpid(), "host": here}
    assert writer_alive(part)


async def test_stopping_while_workers_start_closes_cleanly() -> None:
    killed: list[Any] = []

    class FakeRay:
        def kill(self, actor: Any) -> None:
            killed.append(actor)

    lanes = RayLanes.__new__(RayLanes)
    lanes.ray, lanes.actors, lanes.coord, lanes.workers = FakeRay(), ["a0", "a1"], "c", 2
    lanes.inboxes = []
    await lanes.close(interrupt=True)
    assert killed == ["a0", "a1", "c"] and lanes.actors == []


def test_a_loopback_endpoint_is_refused_when_workers_are_on_another_host() -> None:
    lanes = RayLanes.__new__(RayLanes)
    lanes.found = [{"base_url": "http://127.0.0.1:8000"}]
    lanes.places = [{"node": "n1", "hostname": "here"}, {"node": "n2", "hostname": "gpu-7"}]
    nodes = [{"NodeID": "n1", "NodeManagerAddress": "10.0.0.1"},
             {"NodeID": "n2", "NodeManagerAddress": "10.0.0.2"}]
    with pytest.raises(InputError, match="gpu-7 cannot reach"):
        lanes._check_reach(nodes, "n1")
    nodes[1]["NodeManagerAddress"] = "10.0.0.1"  # both on this host: fine
    lanes._check_reach(nodes, "n1")
    lanes.found = [{"base_url": "http://10.0.0.9:8000"}]
    nodes[1]["NodeManagerAddress"] = "10.0.0.2"
    lanes._check_reach(nodes, "n1")


def test_cli_refuses_workers_per_node_without_ray(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    res = CliRunner().invoke(app, ["run", "--url", "http://127.0.0.1:9", "--model", "m",
                                   "--workers-per-node", "2"])
    assert res.exit_code != 0
    assert "--workers-per-node needs --ray" in res.output
    assert len(res.output.strip().splitlines()) == 1


async def test_a_request_waiting_to_reconnect_keeps_its_budget_on_ray(cluster: Any,
                                                                      tmp_path: Path) -> None:
    """The budget rule of ``tests/replay/test_replay_faults.py`` with the two lanes on Ray
    actors: the first endpoint is down until the second's lane has taken the rest of the
    budget of 4 (through the coordinator's leases), and the refused request, which holds
    one unit, goes on trying: 4 requests reach a server, the refused attempts are rows of
    their own. (A coordinator that stopped every worker once the budget was all leased
    failed this: 3 reached a server.)"""
    import asyncio

    import ray as ray_mod

    from agentbench.replay.raylanes import ray_lanes
    from tests.replay.test_replay_faults import _budget_holds_across_a_reconnect

    if not ray_mod.is_initialized():
        ray_mod.init(address=cluster.address)

    async def after(up: Any) -> None:  # once the budget is spent (actors start slowly)
        while len(up.received) < 3:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)

    res = await _budget_holds_across_a_reconnect(tmp_path, after, 60, 200,
                                                 executor=ray_lanes(ray_mod))
    info = json.loads((res.run_dir / "run.json").read_text())
    assert len({w["node"] for w in info["ray"]["workers"]}) >= 2  # the lanes apart


async def test_a_worker_ray_cannot_start_is_one_line_naming_its_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A load worker Ray cannot place (its node's CPUs held by other work) was a wait
    without end; now it is one error naming the node once ``PLACE_S`` has passed."""
    import asyncio

    from agentbench.replay import raylanes

    class Actor:
        def __init__(self, place: dict[str, Any] | None) -> None:
            self.where = self
            self.place = place

        def remote(self) -> Any:
            async def get() -> dict[str, Any]:
                if self.place is None:
                    await asyncio.Event().wait()  # never placed
                return dict(self.place or {})
            return get()

    monkeypatch.setattr(raylanes, "PLACE_S", 0.2)
    lanes = RayLanes.__new__(RayLanes)
    lanes.actors = [Actor({"node": "n1"}), Actor(None), Actor({"node": "n3"})]
    with pytest.raises(InputError, match=r"within 0.2 s on node gpu-7 \(ab12\): .*free one"):
        await lanes._placed(["here (n1)", "gpu-7 (ab12)", "here (n3)"])
    lanes.actors = [Actor({"node": "n1"}), Actor({"node": "n3"})]
    assert await lanes._placed(["n1", "n3"]) == [{"node": "n1"}, {"node": "n3"}]


async def test_workers_send_the_api_key_and_header_variables_the_driver_has(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint's ``api_key_env`` and a ``${NAME}`` header read the environment; on
    Ray the load workers read their node's (that of its `ray start`, here the cluster's,
    begun before the variables were set), not the driver's: the key was left out of every
    request (each an HTTP 401 on a server that checks it) and a ``${NAME}`` header
    stopped every worker. Now the driver's values go with each worker's run call."""
    import ray as ray_mod

    from agentbench.replay import run_scenario
    from agentbench.replay.raylanes import ray_lanes
    from agentbench.testing.fakeserver import FakeServer, ServerConfig
    from agentbench.traces.model import Session, Trace
    from tests.helpers import openai_scenario
    from tests.replay.test_replay_faults import trace

    if not ray_mod.is_initialized():
        ray_mod.init(address=cluster.address)
    monkeypatch.setenv("AB_RAY_TEST_KEY", "sk-driver-only")
    monkeypatch.setenv("AB_RAY_TEST_TENANT", "tenant-driver-only")
    server = FakeServer(ServerConfig())
    await server.start()
    try:
        sc = openai_scenario(server.url, tmp_path, concurrency=2, endpoint={
            "api_key_env": "AB_RAY_TEST_KEY",
            "headers": {"X-Tenant": "${AB_RAY_TEST_TENANT}"}})
        two = Trace([Session(f"s{i}", None, "root", None, None, None, "test", "x", 0.0,
                             trace(2).sessions[0].turns) for i in range(2)])
        res = await run_scenario(sc, trace=two, progress=False, executor=ray_lanes(ray_mod))
    finally:
        await server.close()
    info = json.loads((res.run_dir / "run.json").read_text())
    assert info["ray"]["lost"] == [], info["ray"]["lost"]
    assert len(server.received) == 4
    for r in server.received:
        assert r.headers.get("Authorization") == "Bearer sk-driver-only"
        assert r.headers.get("X-Tenant") == "tenant-driver-only"
    # the values are in no file of the run
    for f in res.run_dir.rglob("*"):
        if f.is_file():
            assert b"driver-only" not in f.read_bytes(), f


def test_the_variables_endpoints_read_are_those_set_here(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbench.scenario.secrets import env_read
    from tests.helpers import openai_scenario

    monkeypatch.setenv("AB_K", "k")
    monkeypatch.setenv("AB_H", "h")
    monkeypatch.setenv("AB_B", "b")
    monkeypatch.delenv("AB_UNSET", raising=False)
    monkeypatch.setenv("AB_NOT_READ", "x")
    sc = openai_scenario("http://127.0.0.1:1", "out", endpoint={
        "api_key_env": "AB_K", "headers": {"X-A": "Bearer ${AB_H}", "X-B": "${AB_UNSET}"},
        "extra_body": {"meta": {"tags": ["${AB_B}"]}}})
    assert env_read(sc.endpoints) == {"AB_K": "k", "AB_H": "h", "AB_B": "b"}
