"""Launching the engine under test: start a scenario's ``server:`` process in its own
process group, wait until its health URL answers 200, and stop it by that group's PID
after the run, keeping its log and exit status (``server.json``) in the run folder."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentbench.errors import InputError

SERVER_LOG = "server.log"
SERVER_JSON = "server.json"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class EngineError(InputError):
    """The engine could not be started or did not become healthy (one line, exit 2)."""


def expand(text: str, environ: dict[str, str] | None = None, where: str = "server") -> str:
    """``${VAR}`` / ``${VAR:-default}`` from the environment; ``{python}`` is this Python."""
    env = os.environ if environ is None else environ

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        val = env.get(name)
        if val:
            return val
        if default is not None:
            return default
        raise EngineError(f"environment variable {name} is not set", where=where)

    return _VAR.sub(sub, text).replace("{python}", sys.executable)


def resolve_command(cfg: Any) -> list[str]:
    """The argv of ``cfg.command`` (a string is split like a shell would), expanded."""
    raw = shlex.split(cfg.command) if isinstance(cfg.command, str) else list(cfg.command)
    if not raw:
        raise EngineError("empty command", where="server.command")
    return [expand(a, where="server.command") for a in raw]


def _answers(url: str, timeout_s: float = 2.0) -> int | None:
    """HTTP status of a GET (any status, errors included), or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError, TimeoutError):
        return None


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(ln.strip() for ln in lines[-n:] if ln.strip())


class ServerProcess:
    """One started engine: its process (leader of its own group), log and timings."""

    def __init__(self, cfg: Any, base_dir: Path, log_path: Path) -> None:
        self.cfg = cfg
        self.argv = resolve_command(cfg)
        self.env = {k: expand(v, where=f"server.env.{k}") for k, v in cfg.env.items()}
        self.cwd = (base_dir / cfg.cwd) if cfg.cwd else None
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {"command": self.argv, "env": sorted(self.env),
                                     "health_url": cfg.health_url}

    def start(self) -> None:
        """Start the process with stdout+stderr to the log, in a new session (group)."""
        if _answers(self.cfg.health_url) is not None:
            raise EngineError(f"something already answers at {self.cfg.health_url}; stop it "
                              "or choose another port", where="server.health_url")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env}, cwd=self.cwd, start_new_session=True)
        except OSError as e:
            raise EngineError(f"cannot start {self.argv[0]}: {e.strerror}",
                              where="server.command") from None
        finally:
            log.close()
        self.info.update(pid=self.proc.pid,
                         start_wall=datetime.now(UTC).isoformat())
        self._t0 = time.monotonic()

    def wait_healthy(self) -> float:
        """Poll the health URL until it answers 200; return seconds taken. Raises (after
        stopping the process) when it exits or the startup timeout passes."""
        assert self.proc is not None
        deadline = self._t0 + self.cfg.startup_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                self.info["exit_status"] = code
                raise EngineError(f"server exited with status {code} before it was healthy "
                                  f"(log {self.log_path}: {_tail(self.log_path)})",
                                  where="server")
            if _answers(self.cfg.health_url) == 200:
                took = time.monotonic() - self._t0
                self.info["startup_s"] = round(took, 3)
                return took
            if time.monotonic() > deadline:
                self.stop()
                raise EngineError(
                    f"not healthy after {self.cfg.startup_timeout_s:g} s at "
                    f"{self.cfg.health_url} (log {self.log_path}: {_tail(self.log_path)})",
                    where="server.startup_timeout_s")
            time.sleep(0.25)

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``stop_timeout_s``; return the exit
        status (negative: killed by that signal). Idempotent."""
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is None:
            self.info["stopped_by"] = "agentbench"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                code = self.proc.wait(self.cfg.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.info["killed"] = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                code = self.proc.wait(30)
        else:
            self.info.setdefault("stopped_by", "exited by itself")
        # children left in the group (e.g. engine workers) go with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.info["exit_status"] = code
        self.info["end_wall"] = datetime.now(UTC).isoformat()
        return code


@contextlib.contextmanager
def managed_server(cfg: Any, base_dir: Path, staging_dir: Path,
                   secrets: tuple[str, ...] = ()) -> Iterator[ServerRun]:
    """Start ``cfg`` (a scenario ``Server``), wait for health, yield; always stop it.

    Without ``cfg.log_file`` the log starts in ``staging_dir`` and ``ServerRun.adopt``
    moves it into the run folder as soon as that exists (the open file keeps being
    written after the rename)."""
    if cfg.log_file:
        log = Path(cfg.log_file)
        log = log if log.is_absolute() else base_dir / log
    else:
        staging_dir.mkdir(parents=True, exist_ok=True)
        log = staging_dir / f".server-{os.getpid()}-{time.time_ns()}.log"
    sp = ServerProcess(cfg, base_dir, log)
    run = ServerRun(sp, moved=not cfg.log_file, secrets=secrets)
    sp.start()
    try:
        sp.wait_healthy()
        yield run
    finally:
        sp.stop()
        run.finish()


class ServerRun:
    """Ties a started server to the run folder once the replay has made it."""

    def __init__(self, sp: ServerProcess, moved: bool, secrets: tuple[str, ...] = ()) -> None:
        self.sp = sp
        self.move_log = moved
        self.run_dir: Path | None = None
        # API keys (which a command may carry, e.g. `vllm serve --api-key ${KEY}`) never
        # reach server.json or the server.log kept in the run folder
        self.secrets = tuple(s for s in secrets if s)

    @property
    def info(self) -> dict[str, Any]:
        return self.sp.info

    def adopt(self, run_dir: Path) -> None:
        """Put the log in ``run_dir`` (moved when agentbench chose its place)."""
        self.run_dir = run_dir
        if self.move_log:
            dest = run_dir / SERVER_LOG
            self.sp.log_path.replace(dest)
            self.sp.log_path = dest

    def finish(self) -> None:
        """Write ``server.json`` (and copy a user-placed log) into the run folder."""
        self.sp.info["log"] = str(self.sp.log_path)
        if self.run_dir is None:  # the run never started: redact the staged log in place
            if self.move_log and self.sp.log_path.is_file():
                with contextlib.suppress(OSError):
                    self.sp.log_path.write_bytes(self._redact(self.sp.log_path.read_bytes()))
            return
        kept = self.run_dir / SERVER_LOG
        src = kept if self.move_log else self.sp.log_path
        if src.is_file():
            with contextlib.suppress(OSError):
                kept.write_bytes(self._redact(src.read_bytes()))
        text = json.dumps(self.sp.info, indent=1) + "\n"
        (self.run_dir / SERVER_JSON).write_text(self._redact(text.encode()).decode())

    def _redact(self, data: bytes) -> bytes:
        for s in self.secrets:
            data = data.replace(s.encode(), b"<redacted>")
            data = data.replace(json.dumps(s)[1:-1].encode(), b"<redacted>")
        return data
