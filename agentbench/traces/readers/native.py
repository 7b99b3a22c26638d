"""agentbench's own trace format: one parquet file.

The file's rows are the **turns** table (``session_id``, ``turn``, ``t``, ``think_s``,
``api_s``, ``input_tokens``, ``output_tokens``, ``hash_ids`` as ``list<int64>``,
``block_size``, ``cached_tokens``), so ``pandas.read_parquet`` gives the turns directly.
The **sessions** table travels in the file's key-value metadata as an Arrow IPC stream
(key ``agentbench.sessions``); ``read_tables`` returns both as pyarrow tables. The round
trip is lossless: ``read(write(trace)) == trace``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from agentbench.errors import InputError
from agentbench.traces.model import Session, Trace, Turn

FORMAT_KEY = b"agentbench.format"
FORMAT_VALUE = b"native/1"
SESSIONS_KEY = b"agentbench.sessions"
NAME_KEY = b"agentbench.trace_name"

SESSIONS_SCHEMA = pa.schema([
    ("session_id", pa.string()), ("parent_id", pa.string()), ("relation", pa.string()),
    ("parent_turn", pa.int64()), ("join_turn", pa.int64()), ("model", pa.string()),
    ("source", pa.string()), ("scope", pa.string()), ("start_s", pa.float64()),
])
TURNS_SCHEMA = pa.schema([
    ("session_id", pa.string()), ("turn", pa.int64()), ("t", pa.float64()),
    ("think_s", pa.float64()), ("api_s", pa.float64()), ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()), ("hash_ids", pa.large_list(pa.int64())),
    ("block_size", pa.int64()), ("cached_tokens", pa.int64()),
])


def to_tables(trace: Trace) -> tuple[pa.Table, pa.Table]:
    """The (sessions, turns) tables of a trace."""
    ss = trace.sessions
    sessions = pa.table({
        "session_id": [s.session_id for s in ss],
        "parent_id": [s.parent_id for s in ss],
        "relation": [s.relation for s in ss],
        "parent_turn": [s.parent_turn for s in ss],
        "join_turn": [s.join_turn for s in ss],
        "model": [s.model for s in ss],
        "source": [s.source for s in ss],
        "scope": [s.scope for s in ss],
        "start_s": [s.start_s for s in ss],
    }, schema=SESSIONS_SCHEMA)
    turns = [(s.session_id, t) for s in ss for t in s.turns]
    lengths = np.fromiter((len(t.hash_ids) for _, t in turns), dtype=np.int64, count=len(turns))
    offsets = np.zeros(len(turns) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = (np.concatenate([t.hash_ids for _, t in turns]) if turns
              else np.zeros(0, dtype=np.int64))
    hash_col = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
    table = pa.table({
        "session_id": [sid for sid, _ in turns],
        "turn": [t.turn for _, t in turns],
        "t": [t.t for _, t in turns],
        "think_s": [t.think_s for _, t in turns],
        "api_s": [t.api_s for _, t in turns],
        "input_tokens": [t.input_tokens for _, t in turns],
        "output_tokens": [t.output_tokens for _, t in turns],
        "hash_ids": hash_col,
        "block_size": [t.block_size for _, t in turns],
        "cached_tokens": [t.cached_tokens for _, t in turns],
    }, schema=TURNS_SCHEMA)
    return sessions, table


def write(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as one native parquet file."""
    sessions, turns = to_tables(trace)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, sessions.schema) as w:
        w.write_table(sessions)
    meta = {FORMAT_KEY: FORMAT_VALUE, SESSIONS_KEY: sink.getvalue().to_pybytes(),
            NAME_KEY: trace.name.encode()}
    turns = turns.replace_schema_metadata(meta)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(turns, out, compression="zstd")
    return out


#: columns that may hold nulls; every other column of both tables must be complete
_NULLABLE = frozenset({"parent_id", "parent_turn", "join_turn", "model", "api_s",
                       "cached_tokens"})


def read_tables(path: str | Path) -> tuple[pa.Table, pa.Table, str]:
    """(sessions, turns, trace name) of a native file, in the schemas above."""
    try:
        turns = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"not a readable parquet file ({_first_line(e)})",
                         source=str(path)) from None
    meta = turns.schema.metadata or {}
    if meta.get(FORMAT_KEY) != FORMAT_VALUE or SESSIONS_KEY not in meta:
        raise InputError("parquet file is not an agentbench native trace "
                         "(no agentbench.sessions metadata)", source=str(path))
    try:
        with pa.ipc.open_stream(meta[SESSIONS_KEY]) as r:
            sessions = r.read_all()
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"unreadable sessions table ({_first_line(e)})", source=str(path),
                         field=SESSIONS_KEY.decode()) from None
    tables = []
    for what, table, schema in (("turns", turns, TURNS_SCHEMA),
                                ("sessions", sessions, SESSIONS_SCHEMA)):
        missing = [n for n in schema.names if n not in table.schema.names]
        if missing:
            raise InputError(f"{what} table lacks columns", source=str(path),
                             field=missing[0])
        try:
            table = table.select(schema.names).cast(schema)
        except (pa.ArrowException, ValueError) as e:
            raise InputError(f"{what} table has the wrong column types ({_first_line(e)})",
                             source=str(path)) from None
        for name in schema.names:
            col = table.column(name)
            nulls = col.null_count or (name == "hash_ids" and any(
                c.values.null_count for c in col.chunks))
            if nulls and name not in _NULLABLE:
                raise InputError(f"null in the {what} table", source=str(path), field=name)
        tables.append(table)
    return tables[1], tables[0], meta.get(NAME_KEY, b"").decode(errors="replace")


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def read(source: str | Path, **options: Any) -> Trace:
    """Read a native parquet trace; hash ids come back as views of one array."""
    if options:
        name = next(iter(options))
        raise InputError(f"unknown option {name!r} for the native reader", field=name)
    sessions_t, turns_t, name = read_tables(source)
    by_id: dict[str, Session] = {}
    out: list[Session] = []
    for row in sessions_t.to_pylist():
        s = Session(
            session_id=row["session_id"], parent_id=row["parent_id"], relation=row["relation"],
            parent_turn=row["parent_turn"], join_turn=row["join_turn"], model=row["model"],
            source=row["source"], scope=row["scope"], start_s=row["start_s"],
        )
        by_id[s.session_id] = s
        out.append(s)
    col = turns_t.column("hash_ids").combine_chunks()
    offsets = col.offsets.to_numpy()
    values = col.values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    cols = {n: turns_t.column(n).to_pylist() for n in TURNS_SCHEMA.names if n != "hash_ids"}
    for i, sid in enumerate(cols["session_id"]):
        owner = by_id.get(sid)
        if owner is None:
            raise InputError(f"turn of unknown session {sid!r}", source=str(source),
                             where=f"row {i}", field="session_id")
        owner.turns.append(Turn(
            turn=cols["turn"][i], t=cols["t"][i], think_s=cols["think_s"][i],
            api_s=cols["api_s"][i], input_tokens=cols["input_tokens"][i],
            output_tokens=cols["output_tokens"][i],
            hash_ids=values[offsets[i]:offsets[i + 1]], block_size=cols["block_size"][i],
            cached_tokens=cols["cached_tokens"][i],
        ))
    trace = Trace(out, name=name or Path(source).stem)
    try:
        trace.validate()
    except InputError as e:  # name this file, not the source the sessions came from
        raise InputError(e.message, source=str(source), where=e.where, field=e.field) from None
    return trace
