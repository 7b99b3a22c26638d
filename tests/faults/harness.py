"""The fault suite's harness: a fault server process that can be killed and restarted,
agentbench run as a user runs it (``python -m agentbench.cli run``, a process of its own),
and the checks every case makes: one row per request the server saw, the exit code, and
that ``agentbench report`` reads the run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import free_port

HERE = Path(__file__).resolve().parent


@dataclass
class FaultServer:
    """``tests/faults/faultserver.py`` in its own process, on a fixed port."""

    log: Path
    faults: str = "ok"
    port: int = field(default_factory=free_port)
    itl: float = 0.0
    ttft: float = 0.0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultServer:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "faultserver.py"), "--port", str(self.port),
             "--faults", self.faults, "--log", str(self.log), "--itl", str(self.itl),
             "--ttft", str(self.ttft)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("PORT "), f"fault server did not start: {line!r}"
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def seen(self) -> list[tuple[int, str, int]]:
        """(n, fault, t_ns) of each streamed request the server received."""
        out = []
        for line in self.log.read_text().splitlines() if self.log.exists() else []:
            parts = line.split()
            if parts[0] == "seen":
                out.append((int(parts[1]), parts[2], int(parts[3])))
        return out

    def done_ns(self) -> list[int]:
        """When the server finished each response it sent in full."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [int(p[2]) for p in (ln.split() for ln in lines) if p[0] == "done"]


def scenario(tmp_path: Path, url: str, *, lanes: int = 4, extra_endpoint: str = "",
             limits: str = "max_requests: 40", sessions: int = 6, stall_s: float = 0.5
             ) -> Path:
    """A small scenario file: synthetic codex agents scaled to ~1K-token prompts."""
    text = f"""name: faults
endpoints:
  - kind: openai
    url: {url}
    model: fake
    ignore_eos: true
    stall_timeout_s: {stall_s}
    timeout_s: 20
    {extra_endpoint}
trace:
  kind: synth
  profile: codex
  sessions: {sessions}
  transform: {{scale: 0.01}}
load: {{kind: lanes, concurrency: {lanes}}}
timing: {{time_scale: 0.0}}
limits: {{{limits}, recycle: true}}
server_metrics: {{enabled: false}}
"""
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


def sigint_default() -> None:
    """In the child: SIGINT as a terminal would deliver it. A process started in the
    background of a script inherits SIGINT ignored (as do its children, agentbench
    included, which then rightly keeps ignoring it); the tests are about what agentbench
    does with a SIGINT it can receive, whatever started the test run."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def agentbench(*args: str, **kw: Any) -> subprocess.Popen[str]:
    kw.setdefault("preexec_fn", sigint_default)
    return subprocess.Popen([sys.executable, "-m", "agentbench.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def run_cli(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    p = agentbench(*args, **kw)
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def wait_for(pred: Any, timeout: float = 30.0) -> None:
    t = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < t, "timed out waiting"
        time.sleep(0.02)


def rows(run_dir: Path) -> Any:
    import agentbench

    return agentbench.load(run_dir).requests


def run_json(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "run.json").read_text()))


def fault_run(tmp_path: Path, fault_server: Any, faults: str, api: str, *, lanes: int,
              requests: int, stall_s: float = 0.5) -> tuple[Path, Any, Any]:
    """``agentbench run`` of ``requests`` requests on ``lanes`` lanes against a fault
    server answering in turn with ``faults`` (the client's stall timeout ``stall_s``): it
    exits 0 without a traceback, each request the server saw has its row, and run.json
    says ``completed``; (the run folder, its rows, the server)."""
    srv = fault_server(faults)
    sc = scenario(tmp_path, srv.url, lanes=lanes, extra_endpoint=f"api: {api}",
                  limits=f"max_requests: {requests}", stall_s=stall_s)
    r = run_cli("run", str(sc), "-o", str(tmp_path / "out"), "--run-id", "r",
                "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    run = tmp_path / "out" / "r"
    req = rows(run)
    assert len(req) == len(srv.seen()) == requests
    assert run_json(run)["status"] == "completed"
    return run, req, srv


def six_requests(tmp_path: Path, fault_server: Any, faults: str, api: str,
                 stall_s: float = 0.5) -> tuple[Path, Any]:
    """``fault_run`` of 6 requests on 2 lanes: (the run folder, its rows)."""
    run, req, _ = fault_run(tmp_path, fault_server, faults, api, lanes=2, requests=6,
                            stall_s=stall_s)
    return run, req


def report_reads(run_dir: Path, tmp_path: Path) -> None:
    """``agentbench report RUN`` exits 0 and writes the report (recovering a cut run)."""
    out = tmp_path / f"report-{run_dir.name}"
    r = run_cli("report", str(run_dir), "-o", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    assert (out / "report.html").exists() and (out / "report.md").exists()
    assert "Traceback" not in r.stderr


def one_line_error(stderr: str) -> str:
    """The run's error: exactly one ``error:`` line and no traceback."""
    assert "Traceback" not in stderr, stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]
