"""What a run folder is, and finishing one cut short (docs/architecture.md#results-on-disk):
run.json read or required, the folder and its files checked before anything reads them,
and a run whose process is gone (killed, crashed) finished from its spool, under the
folder's lock. :mod:`agentbench.results.reader` reads the tables after this."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agentbench.errors import InputError, ResultsWriteError, os_reason
from agentbench.results import jsonfile
from agentbench.results import schema as R


def read_run_json(run_dir: Path) -> dict[str, Any]:
    path = run_dir / R.RUN_FILE
    if not path.exists():
        return {}
    try:
        data = jsonfile.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"not valid JSON ({e})", source=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("run.json must hold a JSON object", source=str(path))
    return data


def require_run_json(d: Path, scenario: bool = False) -> None:
    """A folder without run.json (empty, mistyped, a copy without it) is no run folder:
    one line. With ``scenario`` (a run to judge: its GPUs, time base and fingerprint are
    in it), so is one whose run.json names no scenario, which every run.json has from the
    run's start (``{}`` gave the gate one GPU and a false per-GPU regression). A run.json
    that is there but no regular file is left to the reader's own check, which names it
    (``_regular_files_only``)."""
    path = d / R.RUN_FILE
    if not os.path.lexists(path):
        _never_started(d)
        raise InputError(f"no run.json: not a run folder agentbench wrote{_runs_held(d)}",
                         source=str(d))
    if scenario and path.is_file() and "scenario" not in (run := read_run_json(d)):
        if "damaged_run_json" in run:  # recovered from a damaged run.json
            raise InputError("its run.json was damaged (kept as "
                             f"{run['damaged_run_json'].get('kept_as')}): the scenario it "
                             "named is lost, and with it the GPUs and fingerprint a gate "
                             "needs", source=str(path))
        raise InputError("run.json names no scenario: not a run agentbench wrote",
                         source=str(path))


def _never_started(d: Path) -> None:
    """A folder that holds only a run's claim (``rundir.CLAIM_FILE``, and perhaps its
    run.json half made): that run was stopped (SIGTERM, SIGKILL) in the instant after it
    took the folder, before its run.json was written. Nothing was sent: one line says so,
    not a file missing."""
    from agentbench.results.rundir import CLAIM_FILE, RUN_TMP_FILE

    try:
        names = {p.name for p in d.iterdir()}
    except OSError:
        return
    if CLAIM_FILE in names and names <= {CLAIM_FILE, RUN_TMP_FILE}:
        raise InputError("holds only the claim of a run stopped before it wrote run.json: "
                         "nothing was sent; remove the folder", source=str(d))


def recover_if_cut_short(d: Path, force: bool = False,
                         on_damaged: Callable[[str], None] | None = None) -> list[str]:
    """A run whose process is gone (killed, crashed) left its rows in a spool: finish its
    parquet files and run.json first. A run still in progress is an error, unless
    ``force`` says its writer is gone whatever its pid says (``agentbench recover
    --force``: a run copied from another host, or whose pid was reused).

    A run.json that is not valid JSON is an error, but with ``on_damaged`` (``agentbench
    recover``) and rows in the spool, it is kept aside as ``run.json.bad``, a new one is
    written (``salvaged_run_json``), the rows recovered, and ``on_damaged`` told so in one
    line (docs/reliability.md)."""
    from agentbench.results.spool import (
        has_spools,
        live_part,
        other_host,
        recover,
        writer_alive,
        writer_runs_agentbench,
    )

    _regular_files_only(d)
    damaged: InputError | None = None
    try:
        run = read_run_json(d) if (d / R.RUN_FILE).exists() else {}
    except InputError as e:
        if not has_spools(d):
            raise
        if on_damaged is None:
            raise InputError(f"{e.message}; its rows are still in the spool: `agentbench "
                             f"recover {d}` writes them", source=e.source) from None
        run, damaged = salvaged_run_json(d), e
    if force:  # for a writer that is gone; never one that still writes (its rows lost)
        for who in (run, live_part(d) or {}):
            if (pid := writer_runs_agentbench(who)) is not None:
                raise InputError(f"agentbench (pid {pid}) still writes this run: --force is "
                                 "for a writer that is gone (a copied run, a reused pid); "
                                 "stop it first (Ctrl-C, or kill), or read the run when it "
                                 "ends", source=str(d))
    else:
        if not has_spools(d) and not (run.get("status") == "running"
                                      and not writer_alive(run)):
            return []
        hint = "read it when it ends, or `agentbench recover --force` if its writer is gone"
        if writer_alive(run):
            host = other_host(run)
            raise InputError(f"the run is still in progress (pid {run.get('pid')}"
                             f"{f' on {host}' if host else ''}); {hint}", source=str(d))
        if (part := live_part(d)) is not None:
            host = other_host(part)
            raise InputError(f"a worker of the run still writes its rows (pid "
                             f"{part.get('pid')}{f' on {host}' if host else ''}); {hint}",
                             source=str(d))
    try:
        with _recovering(d):
            kept = _set_aside(d, run, damaged.message) if damaged is not None else None
            made = recover(d, force=force)
    except OSError as e:  # a full disk: no bad input (exit 1), and nothing lost
        err = ResultsWriteError(str(d), os_reason(e))
        err.hint = (f"the cut-short run's rows are still in its spools: free space, then "
                    f"`agentbench recover {shlex.quote(str(d))}`")
        raise err from None
    if damaged is not None and on_damaged is not None and kept is not None:
        status = read_run_json(d).get("status")
        on_damaged(f"{damaged.one_line()}; kept as {kept.name}, and a new run.json written "
                   f"with status {status} (the scenario it named is lost: reports assume 1 "
                   "GPU, gate refuses the run)")
    return made


#: a top-level key of run.json as ``write_run_json`` lays it out (two-space indent), and
#: the host's name (four); a value cut short does not match: a number counts only with
#: the comma or line end after it (``"pid": 40`` at the end of the text may be 4012's start)
_TOP_LEVEL = re.compile(rb'^  "(pid|status)": (-?[0-9]+|"[a-z_]+")(?:,$|\n)', re.M)
_HOSTNAME = re.compile(rb'^    "hostname": ("(?:[^"\\]|\\.)*"),?$', re.M)


def salvaged_run_json(d: Path) -> dict[str, Any]:
    """What stands in for a run.json that is not valid JSON (cut short, damaged) while its
    rows are recovered: the writer's pid, host and status where the damaged text still
    holds them (so a run whose writer still runs is refused as before), else ``running``
    with no pid, which recovery finishes as ``killed``. The run writes run.json whole (a
    new file replacing the old), so a damaged one is damage, not a write in progress."""
    try:
        text = (d / R.RUN_FILE).read_bytes()
    except OSError:
        text = b""
    run: dict[str, Any] = {"run_id": d.name, "status": "running", "pid": None}
    for key, value in _TOP_LEVEL.findall(text):
        run[key.decode()] = json.loads(value)
    if (host := _HOSTNAME.search(text)) is not None:
        run["host"] = {"hostname": json.loads(host.group(1))}
    return run


def _set_aside(d: Path, run: dict[str, Any], error: str) -> Path | None:
    """Keep the damaged run.json as ``run.json.bad`` (``.bad.1``, ... when taken) and write
    ``run`` in its place, saying so (``damaged_run_json``), unless another reader already
    did (the folder's lock is held). Copied, then replaced: a kill at any point leaves a
    run.json."""
    from agentbench.results.rundir import write_run_json

    path = d / R.RUN_FILE
    try:
        read_run_json(d)
        return None  # replaced by a reader before this one
    except InputError:
        pass
    bad = d / (R.RUN_FILE + ".bad")
    n = 1
    while os.path.lexists(bad):
        bad, n = d / f"{R.RUN_FILE}.bad.{n}", n + 1
    shutil.copyfile(path, bad)
    write_run_json(d, {**run, "damaged_run_json": {"kept_as": bad.name, "error": error}}, ())
    return bad


@contextlib.contextmanager
def _recovering(d: Path) -> Iterator[None]:
    """Hold the run folder's lock while its files are finished: two readers at once (a
    notebook's ``load`` and ``agentbench report``) would otherwise each read the spool and
    commit over the other's table, doubling or losing rows. The second waits, then finds
    nothing left to do (``recover`` is idempotent)."""
    import fcntl

    fd = os.open(d, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _regular_files_only(d: Path) -> None:
    """Every file the run folder keeps (run.json, the tables, their spools, journals and
    commits) is a regular file or absent: a FIFO there would block the reader forever, a
    device could be endless, and a folder cannot be read or replaced."""
    import stat

    from agentbench.results.spool import PENDING_SUFFIXES, SCHEMAS

    names = [R.RUN_FILE, *(name + sfx for name in SCHEMAS
                           for sfx in ("", *PENDING_SUFFIXES, ".tmp"))]
    for name in names:
        path = d / name
        try:
            mode = path.stat().st_mode
        except OSError:
            continue  # absent (or unreadable: the read that follows says so)
        if stat.S_ISDIR(mode):
            raise InputError("a folder where the run keeps a file; move it away",
                             source=str(path))
        if not stat.S_ISREG(mode):
            raise InputError("not a regular file where the run keeps one (a FIFO or a "
                             "device could block or never end); move it away",
                             source=str(path))


def run_folder(run_dir: str | Path) -> Path:
    """``run_dir`` as a folder that is there, or one line: ``''`` (``Path('')`` would be
    the working folder), a name the file system refuses (too long), or no folder."""
    if str(run_dir) == "":
        raise InputError("an empty path: give a results folder")
    d = Path(run_dir)
    try:
        there = d.is_dir()
    except OSError as e:
        raise InputError(f"cannot read it ({e.strerror})", source=str(d)) from None
    if not there and d.is_symlink():
        from agentbench.results.rundir import link_loop

        if link_loop(d):
            raise InputError("a loop of symbolic links", source=str(d))
    if not there:
        raise InputError("a file, not a results folder" if d.is_file()
                         else "results folder not found", source=str(d))
    return d


def _no_run_folder(d: Path) -> None:
    """A folder with neither run.json nor requests.parquet is no run: one line, as ``gate``
    and ``recover`` say it, naming the runs it holds (``results`` for ``results/<run>``).
    Read alone, "requests.parquet: file not found" named no folder (of ``.``) and not
    why. A run that lost only its run.json still reads (its rows are there)."""
    from agentbench.results.spool import has_spools

    if os.path.lexists(d / R.REQUESTS_FILE) or has_spools(d):
        return
    raise InputError("no run.json nor requests.parquet: not a run folder agentbench "
                     f"wrote{_runs_held(d)}", source=str(d))


def _runs_held(d: Path) -> str:
    """`` (it holds runs: a, b; give one)`` for the folder above run folders, else ''."""
    try:
        runs = sorted(p.name for p in d.iterdir() if (p / R.RUN_FILE).is_file())
    except OSError:
        return ""
    more = f" and {len(runs) - 3} more" if len(runs) > 3 else ""
    return f" (it holds runs: {', '.join(runs[:3])}{more}; give one)" if runs else ""


def open_run_folder(run_dir: str | Path) -> Path:
    """``run_dir`` as a run folder whose tables can be read: there, a run's (or its rows'
    at least), and finished first when its process is gone (``recover_if_cut_short``);
    otherwise one line."""
    d = run_folder(run_dir)
    if not (d / R.RUN_FILE).exists():
        _never_started(d)
        _no_run_folder(d)
    recover_if_cut_short(d)
    return d
