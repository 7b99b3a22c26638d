"""The package as a user gets it: ``python -m build`` makes an sdist and a wheel from it;
the wheel, installed in a fresh venv outside the repository (its dependencies from the
package index, as ``pip install agentbench`` would get them), runs the quickstart scenario
copied to an empty folder and a flags-only run against its own ``serve-sim``, with nothing
of the repository on its path.

Slow (about a minute: the build, then ``pip install`` of the dependencies, mostly from
pip's cache, then two short runs); ``.ci/run`` runs it when time allows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: pip's words for "the index cannot be reached" (an offline machine: skip, not fail)
OFFLINE = ("NewConnectionError", "Temporary failure in name resolution",
           "No matching distribution found", "Could not find a version")


def sh(args: list[str | Path], cwd: Path, env: dict[str, str],
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def clean_env(venv: Path) -> dict[str, str]:
    """The environment of a user whose only agentbench is the one in ``venv``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")}
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(ROOT)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def build(source: Path, out: Path) -> Path:
    """The wheel ``python -m build`` makes (from the sdist it makes first)."""
    res = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    wheels = list(out.glob("agentbench-*.whl"))
    assert len(wheels) == 1 and list(out.glob("agentbench-*.tar.gz")), list(out.iterdir())
    return wheels[0]


def check_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = z.read(f"{info}/METADATA").decode()
        entry = z.read(f"{info}/entry_points.txt").decode()
    assert "License-Expression: Apache-2.0" in meta
    assert f"{info}/licenses/LICENSE" in names
    assert "Requires-Python: >=3.11" in meta
    assert "Description-Content-Type: text/markdown" in meta and "# agentbench" in meta
    classifiers = [ln for ln in meta.splitlines() if ln.startswith("Classifier: ")]
    assert len(classifiers) >= 5 and "Classifier: Topic :: System :: Benchmark" in classifiers
    assert "Provides-Extra: dev" in meta
    assert "agentbench = agentbench.cli:main" in entry
    assert not [n for n in names if n.startswith(("tests/", "scenarios/", "benchmarks/"))]
    # the docs that messages name (docs/NAME.md), as files (agentbench/docs is a link)
    docs = {Path(n).name for n in names if n.startswith("agentbench/docs/")}
    assert docs == {p.name for p in (ROOT / "docs").glob("*.md")}, docs


def test_the_wheel_installs_and_runs_outside_the_repository(tmp_path: Path) -> None:
    wheel = build(ROOT, tmp_path / "dist")
    check_metadata(wheel)

    venv = tmp_path / "venv"
    # the interpreter behind this test's venv, without its site-packages (no
    # --system-site-packages): the repository's editable install is not visible
    res = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    env = clean_env(venv)
    work = tmp_path / "work"
    work.mkdir()
    res = sh([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel], work, env, 600)
    if res.returncode != 0 and any(w in res.stderr for w in OFFLINE):
        pytest.skip(f"the package index is out of reach: {res.stderr.strip()[-300:]}")
    assert res.returncode == 0, res.stderr[-3000:]

    # the agentbench imported is the venv's, and nothing of the repository is on the path
    code = ("import json, sys, agentbench; print(json.dumps([agentbench.__file__, "
            "sys.path]))")
    res = sh([venv / "bin" / "python", "-c", code], work, env)
    assert res.returncode == 0, res.stderr
    file, path = json.loads(res.stdout)
    assert Path(file).resolve().is_relative_to(venv.resolve()), file
    assert not [p for p in path if p and Path(p).resolve().is_relative_to(ROOT)], path

    # a doc a message names, from the installed package
    res = sh([venv / "bin" / "agentbench", "docs", "docs/metrics.md"], work, env)
    assert res.returncode == 0 and res.stdout.startswith("# Metrics"), res.stderr

    # the quickstart, copied to an empty folder
    shutil.copy(ROOT / "scenarios" / "quickstart.yaml", work)
    res = sh([venv / "bin" / "agentbench", "run", "quickstart.yaml", "--no-progress"], work, env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    runs = list((work / "results").iterdir())
    assert len(runs) == 1
    run = json.loads((runs[0] / "run.json").read_text())
    assert run["status"] == "completed" and run["time_base"] == "virtual"
    assert str(ROOT) not in json.dumps(run)

    # a flags-only run (the default trace) against serve-sim, both from the venv
    agentbench = venv / "bin" / "agentbench"
    sim = subprocess.Popen([agentbench, "serve-sim", "--port", "0", "--speedup", "50"],
                           cwd=work, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert sim.stdout is not None
        url = sim.stdout.readline().split()[3].removesuffix("/v1")
        res = sh([agentbench, "run", "--url", url, "--model", "sim", "--concurrency", "2",
                  "--duration", "3", "--set", "timing.time_scale=0", "--run-id", "flags",
                  "--no-progress"], work, env, 120)
    finally:
        sim.terminate()
        sim.wait(10)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    run = json.loads((work / "results" / "flags" / "run.json").read_text())
    assert run["status"] == "completed" and run["requests_written"] > 0
    assert run["scenario"]["endpoints"][0]["url"] == url
    assert str(ROOT) not in json.dumps(run)
