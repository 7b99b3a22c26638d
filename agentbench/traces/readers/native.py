"""agentbench's own trace format: one parquet file.

The file's rows are the **turns** (``session_id``, ``turn``, ``t``, ``think_s``, ``api_s``,
``input_tokens``, ``output_tokens``, ``block_size``, ``cached_tokens``), a session's turns
in order. Hash ids are stored as the change from the session's previous turn:
``hash_prefix`` (how many of the previous turn's leading ids this turn repeats) and
``hash_new`` (``list<int64>``, the ids after them), so a turn's ids are
``previous[:hash_prefix] + hash_new``. The **sessions** table travels in the file's
key-value metadata as an Arrow IPC stream (key ``agentbench.sessions``). ``read_tables``
returns both tables with every turn's whole ``hash_ids``. The round trip is lossless:
``read(write(trace)) == trace``.

Why the delta: an agent re-sends almost its whole context every turn, so whole per-turn
lists are turns x context ids (4.1M for the 40 bundled Weka traces against 0.2M new ones),
and decoding such a list column costs several times its size in transient memory (Arrow's
level and page buffers, kept by its allocator): reading the 40 traces took ~190 MB beyond
the interpreter against ~45 MB from their JSON. ``read`` decodes the short ``hash_new``
lists batch by batch and hands out the turns of a session as read-only views of one
buffer while each turn extends the previous one. Files of the first layout (``native/1``,
a whole ``hash_ids`` list per turn) are still read, at their higher cost.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from agentbench.errors import InputError
from agentbench.traces.model import HashIds, Session, Trace, Turn, common_prefix

FORMAT_KEY = b"agentbench.format"
FORMAT_VALUE = b"native/2"
FORMAT_V1 = b"native/1"
SESSIONS_KEY = b"agentbench.sessions"
NAME_KEY = b"agentbench.trace_name"
#: turns per row group on write and per decoded batch on read
BATCH_TURNS = 4096

SESSIONS_SCHEMA = pa.schema([
    ("session_id", pa.string()), ("parent_id", pa.string()), ("relation", pa.string()),
    ("parent_turn", pa.int64()), ("join_turn", pa.int64()), ("model", pa.string()),
    ("source", pa.string()), ("scope", pa.string()), ("start_s", pa.float64()),
])
_SCALARS = [
    ("session_id", pa.string()), ("turn", pa.int64()), ("t", pa.float64()),
    ("think_s", pa.float64()), ("api_s", pa.float64()), ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()), ("block_size", pa.int64()), ("cached_tokens", pa.int64()),
]
#: the turns as stored (``native/2``)
STORED_SCHEMA = pa.schema([*_SCALARS, ("hash_prefix", pa.int64()),
                           ("hash_new", pa.large_list(pa.int64()))])
#: the turns as ``read_tables`` returns them (and ``native/1`` stored them)
TURNS_SCHEMA = pa.schema([*_SCALARS[:7], ("hash_ids", pa.large_list(pa.int64())),
                          *_SCALARS[7:]])
_EMPTY: HashIds = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False


def _sessions_table(sessions: Sequence[Session]) -> pa.Table:
    return pa.table({
        "session_id": [s.session_id for s in sessions],
        "parent_id": [s.parent_id for s in sessions],
        "relation": [s.relation for s in sessions],
        "parent_turn": [s.parent_turn for s in sessions],
        "join_turn": [s.join_turn for s in sessions],
        "model": [s.model for s in sessions],
        "source": [s.source for s in sessions],
        "scope": [s.scope for s in sessions],
        "start_s": [s.start_s for s in sessions],
    }, schema=SESSIONS_SCHEMA)


def _list_array(arrays: Sequence[HashIds]) -> pa.Array:
    lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(arrays) if arrays else _EMPTY
    return pa.LargeListArray.from_arrays(pa.array(offsets),
                                         pa.array(values.astype(np.int64, copy=False)))


def _scalar_columns(turns: Sequence[tuple[str, Turn]]) -> dict[str, Any]:
    return {
        "session_id": [sid for sid, _ in turns],
        "turn": [t.turn for _, t in turns],
        "t": [t.t for _, t in turns],
        "think_s": [t.think_s for _, t in turns],
        "api_s": [t.api_s for _, t in turns],
        "input_tokens": [t.input_tokens for _, t in turns],
        "output_tokens": [t.output_tokens for _, t in turns],
        "block_size": [t.block_size for _, t in turns],
        "cached_tokens": [t.cached_tokens for _, t in turns],
    }


def _stored_table(turns: Sequence[tuple[str, Turn, int]]) -> pa.Table:
    cols = _scalar_columns([(sid, t) for sid, t, _ in turns])
    cols["hash_prefix"] = [k for _, _, k in turns]
    cols["hash_new"] = _list_array([np.asarray(t.hash_ids)[k:] for _, t, k in turns])
    return pa.table(cols, schema=STORED_SCHEMA)


def to_tables(trace: Trace) -> tuple[pa.Table, pa.Table]:
    """The (sessions, turns) tables of a trace, turns with their whole ``hash_ids``."""
    turns = [(s.session_id, t) for s in trace.sessions for t in s.turns]
    cols = _scalar_columns(turns)
    cols["hash_ids"] = _list_array([np.asarray(t.hash_ids) for _, t in turns])
    return _sessions_table(trace.sessions), pa.table(cols, schema=TURNS_SCHEMA)


def write(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as one native parquet file (``BATCH_TURNS`` turns per row group)."""
    sink = pa.BufferOutputStream()
    sessions = _sessions_table(trace.sessions)
    # compressed: the parquet footer holds the metadata twice (raw and in the Arrow schema)
    with pa.ipc.new_stream(sink, sessions.schema,
                           options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(sessions)
    meta = {FORMAT_KEY: FORMAT_VALUE, SESSIONS_KEY: sink.getvalue().to_pybytes(),
            NAME_KEY: trace.name.encode()}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(out, STORED_SCHEMA.with_metadata(meta), compression="zstd",
                          compression_level=9) as writer:
        chunk: list[tuple[str, Turn, int]] = []
        for s in trace.sessions:
            prev: HashIds = _EMPTY
            for t in s.turns:
                chunk.append((s.session_id, t, common_prefix(prev, t.hash_ids)))
                prev = t.hash_ids
                if len(chunk) == BATCH_TURNS:
                    writer.write_table(_stored_table(chunk))
                    chunk = []
        if chunk or not trace.n_requests():
            writer.write_table(_stored_table(chunk))
    return out


#: columns that may hold nulls; every other column of both tables must be complete
_NULLABLE = frozenset({"parent_id", "parent_turn", "join_turn", "model", "api_s",
                       "cached_tokens"})


def _open(path: str | Path) -> tuple[pq.ParquetFile, pa.Table, pa.Schema]:
    """The parquet file, its sessions table and its turns schema, after the format checks."""
    try:
        pf = pq.ParquetFile(path)
    except MemoryError:  # pyarrow's ArrowMemoryError (ulimit -v): no fault of the file
        raise
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"not a readable parquet file ({_first_line(e)})",
                         source=str(path)) from None
    meta = pf.schema_arrow.metadata or {}
    version = meta.get(FORMAT_KEY)
    if version not in (FORMAT_VALUE, FORMAT_V1) or SESSIONS_KEY not in meta:
        raise InputError("parquet file is not an agentbench native trace "
                         "(no agentbench.sessions metadata)", source=str(path))
    try:
        with pa.ipc.open_stream(meta[SESSIONS_KEY]) as r:
            sessions = r.read_all()
    except MemoryError:
        raise
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"unreadable sessions table ({_first_line(e)})", source=str(path),
                         field=SESSIONS_KEY.decode()) from None
    schema = STORED_SCHEMA if version == FORMAT_VALUE else TURNS_SCHEMA
    _has_columns("turns", pf.schema_arrow, schema, path)
    return pf, _checked("sessions", sessions, SESSIONS_SCHEMA, path), schema


def _has_columns(what: str, schema: pa.Schema, want: pa.Schema, path: str | Path) -> None:
    missing = [n for n in want.names if n not in schema.names]
    if missing:
        raise InputError(f"{what} table lacks columns", source=str(path), field=missing[0])


def _checked(what: str, table: pa.Table, schema: pa.Schema, path: str | Path) -> pa.Table:
    """``table`` in ``schema`` (columns selected and cast), nulls only where allowed."""
    _has_columns(what, table.schema, schema, path)
    try:
        table = table.select(schema.names).cast(schema)
    except (pa.ArrowException, ValueError) as e:
        raise InputError(f"{what} table has the wrong column types ({_first_line(e)})",
                         source=str(path)) from None
    for name in schema.names:
        col = table.column(name)
        nulls = col.null_count or (name in ("hash_ids", "hash_new") and any(
            c.values.null_count for c in col.chunks))
        if nulls and name not in _NULLABLE:
            raise InputError(f"null in the {what} table", source=str(path), field=name)
    return table


def _batches(pf: pq.ParquetFile, schema: pa.Schema, path: str | Path) -> Iterator[pa.Table]:
    try:
        for batch in pf.iter_batches(batch_size=BATCH_TURNS, columns=schema.names,
                                      use_threads=False):
            yield _checked("turns", pa.Table.from_batches([batch]), schema, path)
    except MemoryError:
        raise
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"not a readable parquet file ({_first_line(e)})",
                         source=str(path)) from None


def read_tables(path: str | Path) -> tuple[pa.Table, pa.Table, str]:
    """(sessions, turns, trace name) of a native file, the turns with their whole
    ``hash_ids`` (``TURNS_SCHEMA``): turns x context ids, far more memory than ``read``."""
    trace = read(path)
    sessions, turns = to_tables(trace)
    return sessions, turns, trace.name


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def _trees_of(rows: list[dict[str, Any]], roots: Collection[str] | None) -> set[str] | None:
    """The sessions of the trees of ``roots`` (every session whose chain of parents leads
    to one); None (read every tree) without roots, or when one of them is not a root
    session of the file (the filter then names what is missing, from the whole trace)."""
    if roots is None:
        return None
    wanted = set(roots)
    if not wanted <= {r["session_id"] for r in rows if r["parent_id"] is None}:
        return None
    keep = set(wanted)
    grew = True
    while grew:  # children usually follow their parents: one pass, and one to check
        grew = False
        for r in rows:
            if r["parent_id"] in keep and r["session_id"] not in keep:
                keep.add(r["session_id"])
                grew = True
    return keep


class _SharedPrefixes:
    """The hash ids of one session's turns, in order: while each turn starts with all of
    the previous turn's ids, the turns are prefixes of the last one and become views of
    one buffer, joined once from the new ids of each turn."""

    __slots__ = ("pending", "parts", "size", "prev")

    def __init__(self) -> None:
        self.pending: list[tuple[Turn, int]] = []
        self.parts: list[HashIds] = []
        self.size = 0
        self.prev: HashIds = _EMPTY  # the previous turn's whole ids (``native/1`` only)

    def add(self, turn: Turn, prefix: int, new: HashIds, where: str, source: str) -> None:
        """Add ``turn`` whose ids are the previous turn's first ``prefix`` ids + ``new``."""
        if not 0 <= prefix <= self.size:
            raise InputError(f"hash_prefix {prefix} outside the previous turn's {self.size} "
                             "hash ids", source=source, where=where, field="hash_prefix")
        if prefix < self.size:
            buf = self.flush()
            self.parts, self.size = [buf[:prefix]], prefix
        if len(new):
            self.parts.append(np.array(new, dtype=np.int64))  # a copy: batches are freed
            self.size += len(new)
        self.pending.append((turn, self.size))

    def add_whole(self, turn: Turn, ids: HashIds, where: str, source: str) -> None:
        """Add ``turn`` with its whole ids (``native/1``)."""
        k = common_prefix(self.prev, ids) if self.size else 0
        self.prev = ids
        self.add(turn, k, ids[k:], where, source)

    def flush(self) -> HashIds:
        """Give the pending turns their views; return the buffer."""
        buf = np.concatenate(self.parts) if self.parts else _EMPTY
        if len(buf):
            buf.flags.writeable = False  # turns share it: no in-place edits
        for turn, n in self.pending:
            turn.hash_ids = buf[:n]
        self.pending, self.parts, self.size = [], [], 0
        return buf


def read(source: str | Path, sessions: Collection[str] | None = None,
         **options: Any) -> Trace:
    """Read a native parquet trace, batch by batch; the hash ids of a session's turns come
    back as read-only views of shared per-session buffers. ``sessions`` (root sessions a
    filter will keep, every one a root of the file) leaves the other trees' turns unread:
    the trace holds those trees only."""
    if options:
        name = next(iter(options))
        raise InputError(f"unknown option {name!r} for the native reader", field=name)
    pf, sessions_t, schema = _open(source)
    by_id: dict[str, Session] = {}
    prefixes: dict[str, _SharedPrefixes] = {}
    out: list[Session] = []
    rows = sessions_t.to_pylist()
    keep = _trees_of(rows, sessions)
    for row in rows:
        if keep is not None and row["session_id"] not in keep:
            continue
        s = Session(
            session_id=row["session_id"], parent_id=row["parent_id"], relation=row["relation"],
            parent_turn=row["parent_turn"], join_turn=row["join_turn"], model=row["model"],
            source=row["source"], scope=row["scope"], start_s=row["start_s"],
        )
        by_id[s.session_id] = s
        prefixes[s.session_id] = _SharedPrefixes()
        out.append(s)
    known = {r["session_id"] for r in rows} if keep is not None else set()
    whole = schema is TURNS_SCHEMA
    list_col = "hash_ids" if whole else "hash_new"
    row_no = 0
    for turns_t in _batches(pf, schema, source):
        col = turns_t.column(list_col).combine_chunks()
        offsets = col.offsets.to_numpy()
        values = col.values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        cols = {n: turns_t.column(n).to_pylist() for n, _ in _SCALARS}
        pref = None if whole else turns_t.column("hash_prefix").to_pylist()
        for i, sid in enumerate(cols["session_id"]):
            owner = by_id.get(sid)
            if owner is None:
                if keep is not None and sid in known:
                    continue  # a tree the filter leaves out
                raise InputError(f"turn of unknown session {sid!r}", source=str(source),
                                 where=f"row {row_no + i}", field="session_id")
            turn = Turn(
                turn=cols["turn"][i], t=cols["t"][i], think_s=cols["think_s"][i],
                api_s=cols["api_s"][i], input_tokens=cols["input_tokens"][i],
                output_tokens=cols["output_tokens"][i], hash_ids=_EMPTY,
                block_size=cols["block_size"][i], cached_tokens=cols["cached_tokens"][i],
            )
            owner.turns.append(turn)
            ids = values[offsets[i]:offsets[i + 1]]
            where = f"row {row_no + i}"
            if pref is None:
                prefixes[sid].add_whole(turn, ids, where, str(source))
            else:
                prefixes[sid].add(turn, pref[i], ids, where, str(source))
        row_no += turns_t.num_rows
    for p in prefixes.values():
        p.flush()
    trace = Trace(out, name=(pf.schema_arrow.metadata or {}).get(NAME_KEY, b"").decode(
        errors="replace") or Path(source).stem)
    try:
        trace.validate()
    except InputError as e:  # name this file, not the source the sessions came from
        raise InputError(e.message, source=str(source), where=e.where, field=e.field) from None
    return trace
