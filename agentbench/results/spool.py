"""Rows on their way to parquet: the Arrow IPC spool a run appends to as requests finish,
and recovery of a run that was cut short (Ctrl-C, SIGTERM, SIGKILL, a crash, a full disk).

Shared by the writer (``agentbench.results.writer``) and the readers (``agentbench.load``,
``report``, ``gate``, ``agentbench recover``), so a run folder is always readable: a spool
left behind is converted to parquet (every complete batch kept), and run.json's status
``running`` of a process that is gone becomes ``killed``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from agentbench.results import schema as records

SPOOL_SUFFIX = ".spool.arrows"
JOURNAL_SUFFIX = ".journal.jsonl"
#: space a run sets aside in its folder while it writes (``replay.rundir.reserve_space``),
#: given back when the disk fills so that run.json can still say how the run ended
RESERVE_FILE = ".reserve"
SCHEMAS = {records.REQUESTS_FILE: records.REQUESTS_SCHEMA,
           records.SESSIONS_FILE: records.SESSIONS_SCHEMA,
           records.SERVER_METRICS_FILE: records.SERVER_METRICS_SCHEMA}


def journal_of(spool: Path) -> Path:
    return spool.with_name(spool.name.removesuffix(SPOOL_SUFFIX) + JOURNAL_SUFFIX)


def journal_rows(journal: Path, after: int, schema: pa.Schema) -> list[pa.RecordBatch]:
    """Rows of a journal (``<seq> <json>`` lines) that the spool lacks (``seq >= after``).
    A line cut short by the kill, or one that does not fit the schema, is left out."""
    rows: list[dict[str, object]] = []
    maps = [f.name for f in schema if pa.types.is_map(f.type)]  # JSON made the pairs lists
    with contextlib.suppress(OSError), open(journal, "rb") as f:
        for line in f:
            seq, _, text = line.partition(b" ")
            try:
                if int(seq) < after:
                    continue
                row = orjson.loads(text)
            except (ValueError, orjson.JSONDecodeError):
                continue
            if isinstance(row, dict):
                for name in maps:
                    if isinstance(row.get(name), list):
                        row[name] = [tuple(kv) if isinstance(kv, list) else kv
                                     for kv in row[name]]
                rows.append(row)
    try:
        return [pa.RecordBatch.from_pylist(rows, schema=schema)] if rows else []
    except (pa.ArrowException, TypeError, ValueError):  # one bad row: keep the others
        out = []
        for row in rows:
            with contextlib.suppress(pa.ArrowException, TypeError, ValueError):
                out.append(pa.RecordBatch.from_pylist([row], schema=schema))
        return out


def spool_to_parquet(spool: Path, out: Path, schema: pa.Schema) -> int:
    """Convert a spool and its journal (possibly cut short by a kill) to parquet, after the
    rows ``out`` already holds; return rows written."""
    batches: list[pa.RecordBatch] = []
    if out.exists():  # a parquet file cut short is left out: the spool still has its rows
        with contextlib.suppress(pa.ArrowInvalid, OSError):
            batches.extend(pq.read_table(out, schema=schema).to_batches())
    before = len(batches)
    if spool.exists():
        try:
            with pa.OSFile(str(spool), "rb") as src:
                reader = ipc.open_stream(src)
                while True:
                    try:
                        batches.append(reader.read_next_batch())
                    except StopIteration:
                        break
        except (pa.ArrowInvalid, OSError):
            pass  # a truncated last batch: keep what was complete
    journal = journal_of(spool)
    if journal.exists():
        in_spool = sum(b.num_rows for b in batches[before:])
        batches.extend(journal_rows(journal, in_spool, schema))
    table = pa.Table.from_batches(batches, schema=schema)
    tmp = out.with_suffix(out.suffix + ".tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a half-written file would only take space: the spool stays
        raise
    for f in (spool, journal):
        if f.exists():
            f.unlink()
    return table.num_rows


def has_spools(run_dir: Path) -> bool:
    return any((run_dir / (name + sfx)).exists()
               for name in SCHEMAS for sfx in (SPOOL_SUFFIX, JOURNAL_SUFFIX))


def writer_alive(run: dict[str, object]) -> bool:
    """Whether the process that writes this run (run.json ``pid`` on this host) still runs."""
    pid = run.get("pid")
    if run.get("status") != "running" or not isinstance(pid, int):
        return False
    host = run.get("host")
    if isinstance(host, dict) and host.get("hostname") not in (None, socket.gethostname()):
        return True  # another machine's run: not ours to finish
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(run_dir: Path) -> list[str]:
    """Convert spools a cut-short run left behind into parquet files (appending to any
    parquet already there); mark run.json ``killed`` when it still says ``running`` and its
    process is gone. Return the files made."""
    made = []
    for name, schema in SCHEMAS.items():
        spool = run_dir / (name + SPOOL_SUFFIX)
        if spool.exists() or journal_of(spool).exists():
            spool_to_parquet(spool, run_dir / name, schema)
            made.append(name)
    with contextlib.suppress(OSError):
        (run_dir / RESERVE_FILE).unlink()  # the space a killed run set aside
    path = run_dir / records.RUN_FILE
    try:
        run = json.loads(path.read_text())
    except (OSError, ValueError):
        return made
    if isinstance(run, dict) and run.get("status") == "running" and not writer_alive(run):
        run["status"] = "killed"
        run["recovered"] = made
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(run, indent=2))
        os.replace(tmp, path)
    return made
