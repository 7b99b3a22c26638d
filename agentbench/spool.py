"""Rows on their way to parquet: the Arrow IPC spool a run appends to as requests finish,
and recovery of a run that was cut short (Ctrl-C, SIGTERM, SIGKILL, a crash, a full disk).

Shared by the writer (``agentbench.replay.writer``) and the readers (``agentbench.load``,
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

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from agentbench import records

SPOOL_SUFFIX = ".spool.arrows"
SCHEMAS = {records.REQUESTS_FILE: records.REQUESTS_SCHEMA,
           records.SESSIONS_FILE: records.SESSIONS_SCHEMA,
           records.SERVER_METRICS_FILE: records.SERVER_METRICS_SCHEMA}


def spool_to_parquet(spool: Path, out: Path, schema: pa.Schema) -> int:
    """Convert a spool (possibly cut short by a kill) to parquet, after the rows ``out``
    already holds; return rows written."""
    batches: list[pa.RecordBatch] = []
    if out.exists():  # a parquet file cut short is left out: the spool still has its rows
        with contextlib.suppress(pa.ArrowInvalid, OSError):
            batches.extend(pq.read_table(out, schema=schema).to_batches())
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
    table = pa.Table.from_batches(batches, schema=schema)
    tmp = out.with_suffix(out.suffix + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, out)
    if spool.exists():
        spool.unlink()
    return table.num_rows


def has_spools(run_dir: Path) -> bool:
    return any((run_dir / (name + SPOOL_SUFFIX)).exists() for name in SCHEMAS)


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
        if spool.exists():
            spool_to_parquet(spool, run_dir / name, schema)
            made.append(name)
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
