"""The run folder and ``run.json``: the scenario as run (secrets redacted), version, git
commit, host, wall-clock anchor (not for latency), seed, stages and outcome."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import platform
import socket
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentbench.results import schema as records
from agentbench.results.spool import RESERVE_FILE
from agentbench.scenario.secrets import HARMLESS_HEADERS


def make_run_dir(parent: str | Path, name: str, run_id: str | None) -> Path:
    """``<parent>/<run_id>``; a default id is ``<name>-<UTC timestamp>`` made unique."""
    from agentbench.errors import InputError

    base = Path(parent)
    try:
        base.mkdir(parents=True, exist_ok=True)
        if not os.access(base, os.W_OK):
            raise PermissionError(13, "not writable")
    except (FileExistsError, NotADirectoryError):
        raise InputError(_not_a_folder(base), source=str(base), field="output.dir") from None
    except OSError as e:
        raise InputError(f"cannot write results there ({e.strerror})", source=str(base),
                         field="output.dir") from None
    rid = run_id or f"{safe_name(name)}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    path = base / rid
    n = 1
    try:
        while not _claim(path):
            path = base / f"{rid}-{n}"
            n += 1
    except OSError as e:  # a folder that says it is writable and is not (/proc, /sys)
        raise InputError(f"cannot write results there ({e.strerror})", source=str(base),
                         field="output.dir") from None
    return path


def _not_a_folder(base: Path) -> str:
    """What stands where ``output.dir`` (or a folder above it) should be: a file, a link to
    nothing or a loop of links (the last two were called a file, and a file above the
    folder was blamed on the folder)."""
    there = base
    while not os.path.lexists(there) and there.parent != there:
        there = there.parent
    what = "" if there == base else f"{there}: "
    if there.is_symlink() and not there.exists():
        if link_loop(there):
            return f"{what}a loop of symbolic links, not a folder"
        return f"{what}a link to nothing ({os.readlink(there)}), not a folder"
    return f"{what}is a file, not a folder"


def link_loop(path: Path) -> bool:
    """Whether ``path`` is a loop of symbolic links (``exists`` and ``is_dir`` answer one
    False, as for a path that is not there)."""
    try:
        path.stat()
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


#: made in a run folder, exclusively, by the run that takes it; removed once its run.json
#: is there (``write_run_json``)
CLAIM_FILE = ".claim"


def _claim(path: Path) -> bool:
    """Take ``path`` for one run: a folder that is new or empty, claimed by creating
    ``CLAIM_FILE`` exclusively, and still holding nothing else once claimed. Runs started
    in one second (one default id) or with one ``--run-id`` each get their own folder; a
    check of emptiness alone let them share one, each replacing the others' tables. A file
    or a broken link of that name is taken too: the run goes to the next name, as it does
    beside a folder with files."""
    if os.path.lexists(path) and not path.is_dir():
        return False
    if path.exists() and any(path.iterdir()):
        return False
    made = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path / CLAIM_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError:  # a disk with no room for the claim: no empty folder left behind
        if made:
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    if any(p.name != CLAIM_FILE for p in path.iterdir()):  # taken before the claim
        (path / CLAIM_FILE).unlink()
        return False
    return True


def safe_name(name: str) -> str:
    """``name`` (a scenario's) as a plain file name: letters, digits and ``-_.``, the rest
    as ``-``, without a leading ``.`` or ``-`` (a hidden file, an option to the shell),
    at most ``MAX_NAME`` characters (a run folder's name adds its time)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).lstrip(".-")
    if len(safe.encode()) <= MAX_NAME:
        return safe or "run"
    # too long: its start and its end (where a variant, probe or repeat adds its suffix)
    head, tail = safe[:MAX_NAME], safe[-KEEP_TAIL:]
    while len(tail.encode()) > MAX_NAME // 2:  # bytes: a letter may take several
        tail = tail[1:]
    while len(f"{head}--{tail}".encode()) > MAX_NAME:
        head = head[:-1]
    return f"{head}--{tail}"


#: the end of a name kept when it is cut (a variant's, probe's or repeat's suffix)
KEEP_TAIL = 48
#: the longest part of a file name a scenario's name gives, in bytes (file systems allow
#: 255)
MAX_NAME = 120


@functools.cache
def git_commit() -> str | None:
    """The commit of the agentbench checkout, when it is one (with '-dirty' if modified);
    looked up once a process (two ``git`` processes: about 8 ms of each run of a sweep)."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=5)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def redacted_scenario(scenario: Any, secrets: tuple[str, ...]) -> Any:
    """The scenario as JSON data with header values (but harmless ones), ``extra_body``
    values under secret-looking keys, URL passwords and secret strings removed; a
    ``${NAME}`` marker in a redacted value stays (it names the variable, not the value)."""
    from agentbench.scenario.secrets import keep_markers, secret_key, url_userinfo

    data = scenario.model_dump(mode="json")
    clock = getattr(scenario, "clock_mode", None)
    if clock is not None:  # the defaults that depend on the clock, as in force on this one
        data["timing"]["idle_cap_s"] = scenario.timing.idle_cap_for(clock)
        data["server_metrics"]["interval_s"] = scenario.server_metrics.interval_for(clock)
    for ep in data.get("endpoints", []):
        for key in ("url", "metrics_url"):
            if isinstance(ep.get(key), str):
                bare, user, password = url_userinfo(ep[key])
                if user or password:
                    ep[key] = bare.replace("://", "://<redacted>@", 1)
        for k, v in list((ep.get("headers") or {}).items()):
            if k.lower() not in HARMLESS_HEADERS:  # ${NAME} markers stay: names, not values
                ep["headers"][k] = keep_markers(v) if isinstance(v, str) else "<redacted>"
        body = ep.get("extra_body")
        if isinstance(body, dict):
            ep["extra_body"] = _redact_keys(body, secret_key, keep_markers)
    text = json.dumps(data)
    for s in secrets:
        if s:
            text = text.replace(json.dumps(s)[1:-1], "<redacted>")
    return json.loads(text)


def _redact_keys(obj: Any, secret: Any, keep: Any) -> Any:
    """``obj`` with the values under secret-looking keys redacted (a string by ``keep``,
    which keeps its ``${NAME}`` markers)."""
    if isinstance(obj, dict):
        return {k: (keep(v) if isinstance(v, str) else "<redacted>")
                if isinstance(k, str) and secret(k) else _redact_keys(v, secret, keep)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_keys(v, secret, keep) for v in obj]
    return obj


def run_info(scenario: Any, secrets: tuple[str, ...], run_dir: Path,
             trace: Any = None) -> dict[str, Any]:
    """run.json's first content; ``fingerprint`` says what makes another run comparable
    (``agentbench.scenario.fingerprint``), with the trace's content hash when ``trace`` (the
    loaded Trace) is given."""
    from agentbench import __version__
    from agentbench.scenario.fingerprint import fingerprint

    data = redacted_scenario(scenario, secrets)
    return {
        "run_id": run_dir.name,
        "agentbench_version": __version__,
        "git_commit": git_commit(),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(),
                 "python": platform.python_version(), "cpus": os.cpu_count()},
        "seed": scenario.seed,
        "scenario": data,
        "fingerprint": fingerprint(data, str(scenario.clock_mode), trace),
        "start_wall": datetime.now(UTC).isoformat(),
        "end_wall": None,
        "clock": {"kind": "time.perf_counter_ns, relative to the run start",
                  "anchor_wall_ns": time.time_ns(),
                  "anchor_note": "wall-clock time at perf_ns 0; for humans, not for latency"},
        "status": "running",
        # a reader finishes a run whose process is gone (agentbench.results.spool)
        "pid": os.getpid(),
        "stages": [],
        "endpoints": [],
        "files": [records.REQUESTS_FILE, records.SESSIONS_FILE, records.SERVER_METRICS_FILE],
    }


#: run.json while it is written, replaced by it once whole (``write_run_json``, and
#: ``spool.recover`` marking a killed run)
RUN_TMP_FILE = records.RUN_FILE + ".tmp"


def write_run_json(run_dir: Path, info: dict[str, Any], secrets: tuple[str, ...]) -> None:
    text = json.dumps(info, indent=2, default=str)
    for s in secrets:
        if s:
            text = text.replace(s, "<redacted>")
    tmp = run_dir / RUN_TMP_FILE
    try:
        tmp.write_text(text)
        os.replace(tmp, run_dir / records.RUN_FILE)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # run.json now says whose the folder is
        (run_dir / CLAIM_FILE).unlink()


RESERVE_BYTES = 256 * 1024


def reserve_space(run_dir: Path) -> None:
    """Allocate ``RESERVE_FILE`` (real blocks, not a sparse file); best effort. Only where
    the disk has room for it twice over: a reserve that took the last free bytes
    would leave no room for a single row, so on a nearly full disk there is none."""
    path = run_dir / RESERVE_FILE
    try:
        st = os.statvfs(run_dir)
        if st.f_bavail * st.f_frsize < 2 * RESERVE_BYTES:
            return
        with open(path, "wb") as f:
            f.write(b"\0" * RESERVE_BYTES)
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()  # a partial reserve only takes the space the rows need


def release_space(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (run_dir / RESERVE_FILE).unlink()
