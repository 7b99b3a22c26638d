"""Rows on their way to parquet: the Arrow IPC spool a run appends to as requests finish,
and recovery of a run that was cut short (Ctrl-C, SIGTERM, SIGKILL, a crash, a full disk).
The journal beside each spool is read back by ``agentbench.results.journal``.

Shared by the writer (``agentbench.results.writer``) and the readers (``agentbench.load``,
``report``, ``gate``, ``agentbench recover``), so a run folder is always readable: a spool
left behind is converted to parquet (every complete batch kept), and run.json's status
``running`` of a process that is gone becomes ``killed``.

Every step that turns rows into a parquet file is a commit a kill cannot split
(:func:`commit_table`): the new file is written beside the old one, a marker naming what it
consumes is put down, then the file replaces the old one and what it consumed is removed.
A kill at any point leaves either the old state or a marker that the next recovery
finishes (:func:`finish_commits`), so recovering twice, or after a killed recovery, never
loses or doubles a row. A run with ``--workers`` keeps each worker's rows in
``workers/w<i>/`` until the parent merges them (:func:`merge_parts`); a run whose parent
was killed has its parts merged by the next recovery, once no worker still writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from agentbench.errors import InputError
from agentbench.results import jsonfile
from agentbench.results import schema as records
from agentbench.results.journal import journal_rows

SPOOL_SUFFIX = ".spool.arrows"
JOURNAL_SUFFIX = ".journal.jsonl"
#: space a run sets aside in its folder while it writes (``replay.rundir.reserve_space``),
#: given back when the disk fills so that run.json can still say how the run ended
RESERVE_FILE = ".reserve"
#: a commit in progress: the parquet file's new version is ``<name>.tmp``; the marker
#: ``<name>.commit`` lists what it consumed (paths relative to the folder)
COMMIT_SUFFIX = ".commit"
#: worker processes' folders inside a run folder (``--workers``), and each one's pid file
WORKERS_DIR = "workers"
PART_FILE = "part.json"
#: beside a table, what holds rows not yet in it: its spool, its journal, a commit marker
PENDING_SUFFIXES = (SPOOL_SUFFIX, JOURNAL_SUFFIX, COMMIT_SUFFIX)
SCHEMAS = {records.REQUESTS_FILE: records.REQUESTS_SCHEMA,
           records.SESSIONS_FILE: records.SESSIONS_SCHEMA,
           records.SERVER_METRICS_FILE: records.SERVER_METRICS_SCHEMA}


def journal_of(spool: Path) -> Path:
    return spool.with_name(spool.name.removesuffix(SPOOL_SUFFIX) + JOURNAL_SUFFIX)


def spool_to_parquet(spool: Path, out: Path, schema: pa.Schema, own: bool = False) -> int:
    """Convert a spool and its journal (possibly cut short by a kill) to parquet, after the
    rows ``out`` already holds; return rows written. ``own``: the spool is the calling
    writer's, just closed (see ``_spool_batches``)."""
    batches: list[pa.RecordBatch] = []
    if out.exists():  # a parquet file cut short is left out: the spool still has its rows
        with contextlib.suppress(pa.ArrowInvalid, OSError):
            batches.extend(pq.read_table(out, schema=schema).to_batches())
    spooled, in_spool = _spool_batches(spool, own)
    batches.extend(spooled)
    journal = journal_of(spool)
    if journal.exists():
        batches.extend(journal_rows(journal, in_spool, schema))
    table = pa.Table.from_batches(batches, schema=schema)
    commit_table(out, table, [spool, journal])
    return table.num_rows


def _spool_batches(spool: Path, own: bool) -> tuple[list[pa.RecordBatch], int]:
    """The spool's whole batches, and the rows of every batch read (the journal numbers
    its rows after them, a damaged batch's too).

    A writer's own spool, just closed, is memory-mapped: its batches are views of the
    file, not copies into fresh memory (0.37 -> 0.20 CPU s for 6,669 requests). A spool
    left by another process (``recover``) is read into memory, so that nothing can cut
    the file under a view, and each batch is validated whole: a damaged one is left out
    (its rows are lost, the rest kept) instead of crashing the conversion."""
    kept: list[pa.RecordBatch] = []
    rows = 0
    if not spool.exists():
        return kept, rows
    try:
        with (pa.memory_map(str(spool), "r") if own else pa.OSFile(str(spool), "rb")) as src:
            reader = ipc.open_stream(src)
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                rows += batch.num_rows
                if not own:
                    try:
                        batch.validate(full=True)
                    except (pa.ArrowException, ValueError):
                        continue
                kept.append(batch)
    except (pa.ArrowInvalid, OSError):
        pass  # a truncated last batch: keep what was complete
    return kept, rows


def _checkpoint(step: str) -> None:
    """A point between the steps of a commit (tests stop a recovery here, as a kill
    would)."""


#: the run tables' parquet codec: zstd's fastest level wrote the 27,713 rows of
#: ``scale-out.yaml``'s four variants in 7.4 us a row against snappy's (parquet's default)
#: 8.3, into 43 MB against 80, and pyarrow read them back in 4.3 us a row against 7.0
#: (2026-12-06, one core, best of 3)
COMPRESSION, COMPRESSION_LEVEL = "zstd", 1


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth dictionary-encoding in parquet: strings (few distinct values per
    run). Not the per-token lists, where trying a dictionary over hundreds of thousands of
    stamps took 0.4 s of a 0.9 s virtual-time run (600 requests) and made the file larger
    (benchmarks/virtual_bench.py). Those lists keep parquet's default (plain) encoding:
    delta-packed they were 45% smaller and pyarrow read them 5x faster (2026-12-06), but
    fastparquet 2026.9 (a pandas engine) read them back wrong, without an error."""
    return [f.name for f in schema if pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type) or pa.types.is_dictionary(f.type)]


def commit_table(out: Path, table: pa.Table, consumed: Iterable[Path]) -> None:
    """Replace ``out`` with ``table`` and remove ``consumed`` (the files whose rows
    ``table`` took in) as one step: a kill anywhere leaves the old state or a commit that
    :func:`finish_commits` completes."""
    tmp = out.with_name(out.name + ".tmp")
    try:
        pq.write_table(table, tmp, use_dictionary=dictionary_columns(table.schema),
                       compression=COMPRESSION, compression_level=COMPRESSION_LEVEL)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a half-written file would only take space: the sources stay
        raise
    _checkpoint("written")
    names = [os.path.relpath(p, out.parent) for p in consumed]
    marker = out.with_name(out.name + COMMIT_SUFFIX)
    _check_inside(out.parent, names, marker)
    marker_tmp = marker.with_name(marker.name + ".tmp")
    marker_tmp.write_text(json.dumps(names))
    os.replace(marker_tmp, marker)  # the commit point
    _checkpoint("marked")
    _finish_commit(marker)


def _finish_commit(marker: Path) -> None:
    folder = marker.parent
    out = folder / marker.name.removesuffix(COMMIT_SUFFIX)
    tmp = out.with_name(out.name + ".tmp")
    try:
        names = json.loads(marker.read_text())
    except (OSError, ValueError):
        names = []
    names = [str(n) for n in names] if isinstance(names, list) else []
    _check_inside(folder, names, marker)
    if tmp.exists():
        os.replace(tmp, out)
    _checkpoint("replaced")
    for name in names:
        p = folder / name
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
        _checkpoint("consumed")
    marker.unlink()


def _check_inside(folder: Path, names: list[str], marker: Path) -> None:
    """Refuse a commit whose consumed files are not inside the run folder (an absolute
    path, ``..``, or a folder inside that is a link to one outside): a marker is only ever
    written naming the folder's own spools, journals and worker files, and the files it
    names are removed, so a run folder from elsewhere whose marker named ``../x`` had any
    reader (``report``, ``load``) remove ``x`` beside the folder, without a word."""
    root = os.path.realpath(folder)
    for name in names:
        where = os.path.realpath(os.path.dirname(os.path.join(root, name)))
        if os.path.isabs(name) or ".." in Path(name).parts or \
                os.path.commonpath([root, where]) != root:
            raise InputError(f"names {name[:200]!r}, outside the run folder: no commit "
                             "agentbench makes; nothing was changed (remove the marker if "
                             "the folder is yours)", source=str(marker))


def finish_commits(folder: Path) -> None:
    """Complete the commits a kill interrupted in ``folder`` (see :func:`commit_table`)."""
    for marker in sorted(folder.glob("*" + COMMIT_SUFFIX)):
        _finish_commit(marker)


def parts_of(run_dir: Path) -> list[Path]:
    """The worker folders of a run with ``--workers`` not merged yet."""
    d = run_dir / WORKERS_DIR
    return sorted(p for p in d.iterdir() if p.is_dir()) if d.is_dir() else []


def merge_parts(run_dir: Path, parts: list[Path]) -> int:
    """Append each part folder's rows (spools left by a killed worker recovered first) to
    ``run_dir``'s parquet files, rows ordered by end time; remove the parts; return the
    number of request rows. Each file is one commit, so a kill mid-merge loses and doubles
    nothing: the next recovery merges what is left."""
    for d in parts:
        if d.exists():
            recover(d)
    n_requests = 0
    for name, schema in SCHEMAS.items():
        own = [p for p in (d / name for d in parts) if p.exists()]
        files = [p for p in [run_dir / name, *own] if p.exists()]
        tables = [pq.read_table(p, schema=schema) for p in files]
        table = pa.concat_tables(tables) if tables else schema.empty_table()
        if "end_ns" in schema.names and table.num_rows:
            table = table.sort_by([("end_ns", "ascending")])
        commit_table(run_dir / name, table, own)
        if name == records.REQUESTS_FILE:
            n_requests = table.num_rows
    for d in parts:
        shutil.rmtree(d, ignore_errors=True)
    with contextlib.suppress(OSError):
        (run_dir / WORKERS_DIR).rmdir()
    return n_requests


def live_part(run_dir: Path) -> dict[str, object] | None:
    """The pid file of a worker of this run that still writes, or None."""
    for d in parts_of(run_dir):
        try:
            part = json.loads((d / PART_FILE).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(part, dict) and writer_alive(part):
            return part
    return None


def has_spools(run_dir: Path) -> bool:
    """Whether the run's rows are not all in its parquet files yet: spools or journals, an
    interrupted commit, or worker folders not merged."""
    return any((run_dir / (name + sfx)).exists()
               for name in SCHEMAS for sfx in PENDING_SUFFIXES) \
        or (run_dir / WORKERS_DIR).is_dir()


def other_host(run: dict[str, object]) -> str | None:
    """The host that wrote this run (run.json ``host.hostname``) when it is not this one."""
    host = run.get("host")
    name = host.get("hostname") if isinstance(host, dict) else None
    return str(name) if name is not None and name != socket.gethostname() else None


def writer_runs_agentbench(run: dict[str, object]) -> int | None:
    """The pid of this run's writer when it is, beyond doubt, still writing it: alive on
    this host (``writer_alive``) and an agentbench process by its command line (Linux's
    /proc). Not a reused pid then, which ``recover --force`` is for; None otherwise, and
    where the command line cannot be read."""
    if not writer_alive(run) or other_host(run) is not None or isinstance(run.get("owner"),
                                                                           dict):
        return None
    pid = run.get("pid")
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    # the console script (``.../bin/agentbench run ...``) or ``python -m agentbench.cli``
    ours = any(os.path.basename(a) == b"agentbench" or a == b"agentbench.cli" for a in args)
    return pid if isinstance(pid, int) and ours else None


def writer_alive(run: dict[str, object]) -> bool:
    """Whether the process that writes this run (run.json ``pid`` on this host) still runs.
    A worker part written for a Ray driver (``owner``: the driver's pid and host) lives as
    long as that driver: Ray ends a driver's actors with it."""
    owner = run.get("owner")
    if isinstance(owner, dict):
        return writer_alive({**owner, "status": run.get("status")})
    pid = run.get("pid")
    if run.get("status") != "running" or not isinstance(pid, int) or isinstance(pid, bool):
        return False
    if other_host(run) is not None:
        return True  # another machine's run: not ours to finish
    if pid <= 0:  # no process's: os.kill would ask about a process group, or every process
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or past any pid
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has ended but its parent has not waited for it (a run killed from a
    notebook's ``Popen`` without ``wait``; a container whose init reaps nothing): signal 0
    still finds it, yet it writes nothing more. Linux's /proc; elsewhere False."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses, so read past the last
    fields = stat.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] in ("Z", "X")


def recover(run_dir: Path, force: bool = False) -> list[str]:
    """Convert spools a cut-short run left behind into parquet files (appending to any
    parquet already there); mark run.json ``killed`` when it still says ``running`` and its
    process is gone (``force``: whatever its pid says: a run copied from another host, or
    whose pid was reused), with empty tables when it was killed before any row. Return the
    files made."""
    from agentbench.results.rundir import RUN_TMP_FILE  # (rundir imports this module)

    made = []
    finish_commits(run_dir)
    for name, schema in SCHEMAS.items():
        spool = run_dir / (name + SPOOL_SUFFIX)
        if spool.exists() or journal_of(spool).exists():
            spool_to_parquet(spool, run_dir / name, schema)
            made.append(name)
    with contextlib.suppress(OSError):
        (run_dir / RESERVE_FILE).unlink()  # the space a killed run set aside
    path = run_dir / records.RUN_FILE
    try:
        run = jsonfile.loads(path.read_text())
    except (OSError, ValueError):
        return made
    if not isinstance(run, dict):
        return made
    gone = force or not writer_alive(run)
    parts = parts_of(run_dir)
    if parts and gone and (force or live_part(run_dir) is None):
        # the parent was killed: its workers' rows are still in their folders
        merge_parts(run_dir, parts)
        made += [f"{len(parts)} worker folder{'s' if len(parts) > 1 else ''}"]
    if run.get("status") == "running" and gone:
        for name in (records.REQUESTS_FILE, records.SESSIONS_FILE):
            if not (run_dir / name).exists():  # killed before its first row
                commit_table(run_dir / name, SCHEMAS[name].empty_table(), [])
                made.append(name)
        run["status"] = "killed"
        run["recovered"] = made
        tmp = run_dir / RUN_TMP_FILE
        tmp.write_text(json.dumps(run, indent=2))
        os.replace(tmp, path)
    return made
