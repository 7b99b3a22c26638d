"""Variants as Ray tasks on a local two-node Ray cluster (``run_experiment(..., ray=...)``,
``agentbench run --ray``): the run folders are the same as when the variants run one after
another in this process and the tasks spread over both nodes (a variant that measures an
endpoint sends its load from Ray actors instead: tests/replay/test_ray_lanes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, local_ray_cluster

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'agentbench[ray]')")

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("ray")]

#: three what-if variants, cut to a few simulated minutes each
SWEEP = """
name: sweep
seed: 3
endpoints:
  - {kind: simulated, name: sim, instances: 2, preset: h200-llama3-70b}
trace: {kind: synth, profile: codex, sessions: 6, transform: {scale: 0.25}}
load: {kind: lanes, concurrency: 4}
limits: {max_requests: 60, recycle: true}
hardware: {gpus: 2, gpu_hour_usd: 3.0}
variants:
  - name: round-robin
  - name: affinity
    set: {endpoints.0.router: session_affinity}
  - name: shared-tier
    set: {endpoints.0.shared_tier: {capacity_blocks: 200000}}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with local_ray_cluster(2) as c:
        yield c


def _run(folder: Path, **kw: Any) -> Any:
    from agentbench.experiment import run_experiment

    folder.mkdir()
    (folder / "sweep.yaml").write_text(SWEEP)
    here = Path.cwd()
    os.chdir(folder)  # a relative output.dir, resolved the same way by both
    try:
        return run_experiment(folder / "sweep.yaml", **kw)
    finally:
        os.chdir(here)


def test_a_sweep_on_two_ray_nodes_gives_the_local_run_folders(cluster: Any,
                                                               tmp_path: Path) -> None:
    local = _run(tmp_path / "local")
    remote = _run(tmp_path / "ray", ray=cluster.address)
    assert [r.scenario.name for r in remote.runs] == [r.scenario.name for r in local.runs]
    assert len({r.node for r in remote.runs}) == 2  # both nodes ran variants
    assert all(r.node is None for r in local.runs)
    same = subprocess.run([sys.executable, str(ROOT / "scripts" / "same_runs.py"),
                           str(tmp_path / "local" / "results"),
                           str(tmp_path / "ray" / "results")],
                          capture_output=True, text=True, check=False)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "3 run folders before, 3 after, 0 differ" in same.stdout
    assert remote.comparison.headlines == local.comparison.headlines


@pytest.mark.parametrize("address", ["127.0.0.1:" + "9" * 30, "127.0.0.1:65536",
                                     "ray://127.0.0.1:" + str(2**70), "127.0.0.1:0",
                                     "127.0.0.1:" + "9" * 5000, "127.0.0.1:\u00b2",
                                     ":6379", "ray://:6379", "[]:6379"])
def test_a_port_no_socket_can_have_is_not_a_ray_address(address: str) -> None:
    """A port past 65535 (or 0, or digits ``int`` refuses) is refused as not a Ray
    address, in one line; one past what the C resolver takes was an OverflowError
    traceback, 5,000 digits or a superscript digit a ValueError traceback. So is an
    address without a host (it read "nothing answers there")."""
    from agentbench.errors import InputError
    from agentbench.experiment.raysweep import _check_listening

    with pytest.raises(InputError, match="not a Ray address"):
        _check_listening(address)


def test_cli_says_a_huge_port_is_not_a_ray_address_in_one_line(tmp_path: Path) -> None:
    """One line naming the option typed (``--ray``); the library's error names its
    argument (``ray``), as its other arguments' do (it named ``--ray`` to a caller of
    ``run_experiment``)."""
    import agentbench
    from agentbench.errors import InputError

    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "run",
                          str(ROOT / "scenarios" / "shared-kv-what-if.yaml"), "-o",
                          str(tmp_path), "--ray", "127.0.0.1:" + str(2**70)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "not a Ray address" in res.stderr
    assert "field '--ray'" in res.stderr
    with pytest.raises(InputError, match="not a Ray address") as e:
        agentbench.run_experiment(ROOT / "scenarios" / "shared-kv-what-if.yaml",
                                  ray="127.0.0.1:" + str(2**70))
    assert e.value.field == "ray"


def test_local_starts_a_ray_of_its_own_even_with_ray_address_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--ray local`` is a Ray started for this run: Ray's ``init(address=None)`` joins
    the cluster named by RAY_ADDRESS (or the last one ``ray start`` began on this host),
    so ``local`` must reach Ray as ``"local"``, which always starts one."""
    from agentbench.experiment import raysweep

    got: list[Any] = []
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda address=None, **_: got.append(address))
    raysweep.connect("local")
    assert got == ["local"]


def test_an_address_is_checked_when_ray_is_connected_already(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From Python (a notebook's second run), Ray may be connected already: the address
    given used to be ignored, so a bad one, or another cluster's, ran on the connected
    cluster. Now a bad one is refused, and another cluster's port too."""
    from agentbench.errors import InputError
    from agentbench.experiment import raysweep

    class Context:
        gcs_address = "10.0.0.5:6379"

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context())
    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("connected already"))
    with pytest.raises(InputError, match="not a Ray address"):
        raysweep.connect("garbage")
    with pytest.raises(InputError, match="connected to the cluster at 10.0.0.5:6379"):
        raysweep.connect("10.0.0.9:6380")
    for same in ("127.0.0.1:6379", "10.0.0.5:6379", "auto", "local", "ray://head:10001"):
        assert raysweep.connect(same) is ray



def test_sigterm_while_ray_starts_is_agentbenchs_to_handle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM in the seconds ``ray.init`` starts a local Ray took Ray's own handler,
    ``sys.exit(15)``: exit 15 without "terminated" (a run ends with 143), and Ray's agents
    left running. Now what Ray started is shut down and the signal goes to the handler
    the process had (agentbench's: ``Terminated``, 143)."""
    import signal

    from agentbench.experiment import raysweep

    class Terminated(BaseException):
        pass

    def handler(signum: int, frame: object) -> None:
        raise Terminated

    def init(**_: Any) -> None:
        raise SystemExit(signal.SIGTERM)  # Ray's handler, while it starts

    shut: list[bool] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: shut.append(True))
    before = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(Terminated):
            raysweep.connect("local")
        assert shut == [True] and signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_sigterm_after_joining_ray_is_agentbenchs_to_handle() -> None:
    """``ray.init`` put its own SIGTERM handling in place of agentbench's (a stack dump and
    exit 15 or an abort: a Ray sweep's driver sent SIGTERM died so, where a run ends with
    "terminated", exit 143); and agentbench's handler, raising while Ray waited for a
    variant, came out of Ray as a ``SystemError`` traceback (exit 1). Now joining Ray keeps
    the process's handler, and the sweep's wait lets it run (a wait without a timeout ran
    it once a task ended) and raises ``Terminated`` as itself: here a task that never
    ends sends the driver SIGTERM while the driver waits for it."""
    code = """
import os, signal, time
from agentbench import cli
signal.signal(signal.SIGTERM, cli._terminate)
from agentbench.experiment.raysweep import connect, wait_one
ray = connect("local")

def term(pid):
    os.kill(pid, signal.SIGTERM)
    time.sleep(3600)  # never ends: the driver must not wait for it

try:
    wait_one(ray, [ray.remote(num_cpus=0)(term).remote(os.getpid())])
    print("not raised")
except cli.Terminated:
    print("terminated by agentbench")
finally:
    ray.shutdown()
"""
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=150)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr[-2000:])
    assert "terminated by agentbench" in res.stdout


#: two variants of about half a minute each: still running when the driver is stopped
LONG = """
name: long
seed: 3
endpoints:
  - {kind: simulated, name: sim, instances: 4, preset: h200-llama3-70b}
trace: {kind: synth, profile: codex, sessions: 40}
load: {kind: lanes, concurrency: 32}
limits: {max_requests: 100000, recycle: true}
variants:
  - name: a
  - name: b
    set: {endpoints.0.router: session_affinity}
"""


def test_a_stopped_ray_sweep_leaves_its_running_variants_interrupted(tmp_path: Path) -> None:
    """SIGTERM of a Ray sweep's driver stops the variants still running as a local run
    stops: their rows and run.json written, ``interrupted``. The driver's stop killed
    their workers (a forced cancel, or Ray's shutdown), leaving each folder ``running``,
    which readers take for a killed run. Ctrl-C takes the same path (any exception out of
    the wait; checked by hand, exit 130)."""
    import json
    import signal
    import time

    from tests.faults.harness import agentbench, wait_for

    (tmp_path / "long.yaml").write_text(LONG)
    p = agentbench("run", "long.yaml", "--ray", "local", cwd=tmp_path,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: any(tmp_path.glob("results/*/run.json")), 120)
        time.sleep(1.5)  # the variants' lanes are under way
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 143, err[-3000:]
    status = [json.loads(f.read_text())["status"]
              for f in tmp_path.glob("results/*/run.json")]
    assert status and set(status) == {"interrupted"}, (status, err[-3000:])


def test_stopping_the_tasks_never_hides_why_the_sweep_stopped() -> None:
    """``stop_tasks`` runs while an error (a node or the whole cluster lost) or a signal
    ends the sweep: Ray's own errors in its cancels and waits must not replace that one
    (a cancel that raised made the traceback Ray's, and left the other tasks running).
    Every task still gets its forced cancel at the end."""
    from agentbench.experiment.raysweep import stop_tasks

    class LostRay:
        def __init__(self) -> None:
            self.forced: list[str] = []

        def cancel(self, ref: str, force: bool = False) -> None:
            if force:
                self.forced.append(ref)
            raise ConnectionError("the cluster is gone")

        def wait(self, refs: list[str], num_returns: int, timeout: float) -> Any:
            raise ConnectionError("the cluster is gone")

    lost = LostRay()
    stop_tasks(lost, ["a", "b"], within_s=1.0)  # no exception
    assert lost.forced == ["a", "b"]
