"""Results as the run goes (docs/architecture.md#results-on-disk): each finished row is
appended at once to a journal (one JSON line, ~4 us), rows are written in batches to an
Arrow IPC spool (the journal is then emptied), and the spool is converted to parquet when
the run ends (normally, on Ctrl-C or on a crash). The journal is what makes SIGKILL lose no
finished row; a spool and journal left by a killed process are converted by
``agentbench.results.spool.recover``, which every reader calls."""

from __future__ import annotations

import contextlib
import errno
import os
import time
from array import array
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from agentbench.errors import ResultsWriteError
from agentbench.results import schema as records
from agentbench.results.journal import float_columns, nonfinite_as_text
from agentbench.results.samples import SampleBlock, blocks_batch
from agentbench.results.spool import JOURNAL_SUFFIX, SPOOL_SUFFIX, recover, spool_to_parquet

__all__ = ["SPOOL_SUFFIX", "ResultsWriter", "recover", "spool_to_parquet"]


#: errors of a disk that is full (or a quota, or a file size limit): the rows that still fit
#: are written one by one; any other write error stops the spool at once
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


#: wall seconds between calls of ``ResultsWriter.on_tick``
TICK_EVERY_S = 0.5

#: numpy's dtype of an ``array.array``'s type code (the integer ones rows carry)
_ARRAY_DTYPES = {"q": np.int64, "l": np.int64, "i": np.int32}


def _as_numpy(value: Any) -> Any:
    """orjson's hook for an ``array.array`` of integers (a row's token events): the same
    JSON list, through numpy's fast path."""
    if isinstance(value, array):
        return np.frombuffer(value, dtype=_ARRAY_DTYPES[value.typecode])
    raise TypeError(f"cannot serialize {type(value).__name__}")


def _batch(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """``pa.RecordBatch.from_pylist(rows, schema)``, with each list column whose values are
    all ``array.array``s (or None) built from their bytes at once: pyarrow's per-element
    conversion is the slow part of a row, most of all for integers strewn over memory."""
    fast = [i for i, f in enumerate(schema) if pa.types.is_list(f.type)
            and all(r[f.name] is None or isinstance(r[f.name], array) for r in rows)]
    if not fast:
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    rest = pa.schema([f for i, f in enumerate(schema) if i not in fast])
    cols = dict(zip(rest.names, pa.RecordBatch.from_pylist(rows, schema=rest).columns,
                    strict=True))
    for i in fast:
        f = schema.field(i)
        vals = [r[f.name] for r in rows]
        item = f.type.value_type
        dtype = np.dtype(item.to_pandas_dtype())
        lens = [0 if v is None else len(v) for v in vals]
        offsets = np.zeros(len(vals) + 1, dtype=np.int32)
        np.cumsum(lens, out=offsets[1:])
        present = [v for v in vals if v is not None]
        if all(_ARRAY_DTYPES[v.typecode] == dtype for v in present):
            flat = np.frombuffer(b"".join(present), dtype=dtype)  # one copy of every row's
        else:
            flat = np.concatenate([np.frombuffer(v, dtype=_ARRAY_DTYPES[v.typecode])
                                   for v in present] or [np.zeros(0, dtype=dtype)]
                                  ).astype(dtype, copy=False)
        mask = pa.array([v is None for v in vals], type=pa.bool_())
        cols[f.name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=item),
                                                type=f.type, mask=mask)
    return pa.RecordBatch.from_arrays([cols[n] for n in schema.names], schema=schema)


class _Spool:
    """Rows appended to an Arrow IPC stream file (the schema once, then one message per
    batch), written with plain ``os.write`` so that a failed write can be cut back to the
    last whole batch: a full disk keeps every row that fits, and the file stays a valid
    stream that :func:`agentbench.results.spool.spool_to_parquet` reads."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        #: rows not yet spooled, in order: lists of row dicts and sample blocks
        self.parts: list[list[dict[str, Any]] | SampleBlock] = []
        self.pending = 0  # rows in ``parts``
        self._fd: int | None = None
        self._size = 0
        self.written = 0
        self.failed: ResultsWriteError | None = None
        self.journaled = 0  # rows 0..journaled-1 are on disk in the journal or the spool
        self.journal_path = path.with_name(
            path.name.removesuffix(SPOOL_SUFFIX) + JOURNAL_SUFFIX)
        #: float columns, whose NaN and infinities the journal writes as text (JSON has
        #: none: orjson writes null, which recovery would refuse in a required column)
        self._floats = float_columns(schema)
        self._journal: int | None = None

    def add(self, *rows: dict[str, Any]) -> None:
        """Buffer rows and append them to the journal in one write (``<seq> <json>`` a
        line: the row's place in the spool, so recovery takes only what the spool lacks).
        A journal the disk refuses makes the buffered rows go to the spool at once (which
        decides the failure)."""
        first = self.written + self.pending
        if self.parts and isinstance(self.parts[-1], list):
            self.parts[-1].extend(rows)
        else:
            self.parts.append(list(rows))
        self.pending += len(rows)
        floats = self._floats
        self._journal_lines(first, len(rows), lambda: b"".join(
            b"%d %s\n" % (first + i, orjson.dumps(
                nonfinite_as_text(row, floats) if floats else row, default=_as_numpy,
                option=orjson.OPT_SERIALIZE_NUMPY))
            for i, row in enumerate(rows)))

    def add_block(self, block: SampleBlock) -> None:
        """``add`` for the rows of a server-metrics sample kept as columns."""
        first = self.written + self.pending
        self.parts.append(block)
        self.pending += len(block)
        self._journal_lines(first, len(block), lambda: block.journal(first))

    def _journal_lines(self, first: int, n: int, lines: Callable[[], bytes]) -> None:
        try:
            if self._journal is None:
                self._journal = os.open(self.journal_path,
                                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                                        0o644)
            data = lines()
            if os.write(self._journal, data) != len(data):
                raise OSError(errno.ENOSPC, "short write")
            self.journaled = first + n
        except OSError:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows; raise ResultsWriteError (once) when the disk refuses
        them. After a failure rows are dropped (counted in ``lost``)."""
        if not self.pending or self.failed is not None:
            return
        batch = self._buffered()
        self.parts, self.pending = [], 0
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                self._write(self.schema.serialize())
            self._put(batch)
        except OSError as e:
            self.failed = ResultsWriteError(str(self.path), e.strerror or str(e))
        if self._journal is not None and self.failed is None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._journal, 0)  # every journaled row is in the spool now
        if self.failed is not None:
            raise self.failed

    def _buffered(self) -> pa.RecordBatch:
        """The buffered rows as one record batch: sample blocks as columns; row dicts
        (with any blocks among them as rows, which only a run mixing the in-process
        simulator with scraped endpoints makes) through ``_batch``."""
        blocks = [p for p in self.parts if isinstance(p, SampleBlock)]
        if len(blocks) == len(self.parts):
            return blocks_batch(blocks, self.schema)
        return _batch([r for p in self.parts
                       for r in (p.rows() if isinstance(p, SampleBlock) else p)], self.schema)

    def _put(self, batch: pa.RecordBatch) -> None:
        try:
            self._write(batch.serialize())
            self.written += batch.num_rows
        except OSError as e:
            if e.errno not in _NO_SPACE or batch.num_rows == 1:
                raise
            half = batch.num_rows // 2  # keep what fits: halves, down to single rows
            self._put(batch.slice(0, half))
            self._put(batch.slice(half))

    def _write(self, data: Any) -> None:
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            with contextlib.suppress(OSError):  # back to the last whole message
                os.ftruncate(self._fd, self._size)
                os.lseek(self._fd, self._size, os.SEEK_SET)
            raise
        self._size += len(data)

    def close(self, out: Path) -> None:
        """Flush, then convert to parquet; a failure leaves the spool for ``recover``."""
        try:
            self.flush()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._journal is not None:
                os.close(self._journal)
                self._journal = None
        if self.failed is None:
            with contextlib.suppress(OSError):
                self.journal_path.unlink()
        try:
            spool_to_parquet(self.path, out, self.schema, own=True)
        except OSError as e:
            raise ResultsWriteError(str(out), e.strerror or str(e)) from None


class ResultsWriter:
    """requests / sessions / server-metrics rows of one run folder."""

    def __init__(self, run_dir: Path, flush_rows: int = 128) -> None:
        self.run_dir = run_dir
        self.flush_rows = flush_rows
        self._spools = {
            records.REQUESTS_FILE: _Spool(run_dir / (records.REQUESTS_FILE + SPOOL_SUFFIX),
                                          records.REQUESTS_SCHEMA),
            records.SESSIONS_FILE: _Spool(run_dir / (records.SESSIONS_FILE + SPOOL_SUFFIX),
                                          records.SESSIONS_SCHEMA),
            records.SERVER_METRICS_FILE: _Spool(
                run_dir / (records.SERVER_METRICS_FILE + SPOOL_SUFFIX),
                records.SERVER_METRICS_SCHEMA),
        }
        for spool in self._spools.values():
            # pyarrow initialises its conversion machinery lazily (~0.3 s): pay that now,
            # not in the first flush in the middle of the run
            pa.RecordBatch.from_pylist([], schema=spool.schema)
        self.n_requests = 0
        self.n_errors = 0
        self.recent_ttft_ms: deque[float] = deque(maxlen=256)
        self.closed = False
        #: the first write the disk refused; the run stops on it (``on_failure``)
        self.failure: ResultsWriteError | None = None
        self.on_failure: Callable[[ResultsWriteError], object] | None = None
        self.lost = 0  # rows dropped after a failure
        #: spool everything buffered once this many rows (of all tables) came since the
        #: last such flush (a virtual-time run, whose rows come fast: no flush loop to
        #: wake); None: the run's flush loop does it. A count, not wall time: where a
        #: table's batches end shapes its parquet file's bytes, so a flush every wall
        #: second made a long simulated run's requests.parquet differ, byte for byte, from
        #: run to run (its rows the same); every row is in the journal meanwhile
        self.flush_every_rows: int | None = None
        self._unflushed = 0
        #: called when a row comes ``TICK_EVERY_S`` wall seconds or more after the last call
        #: (a virtual-time run's progress display: no loop on the simulated clock to wake)
        self.on_tick: Callable[[], None] | None = None
        self._ticked_at = time.monotonic()

    def add_request(self, row: dict[str, Any],
                    amend: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Write a request's row (``agentbench.transport.finish.finish_record``; ``amend``
        may reclassify it first, e.g. a context overflow); return the row."""
        if amend is not None:
            amend(row)
        self.n_requests += 1
        if row["status"] != records.OK:
            self.n_errors += 1
        elif row["first_token_ns"] is not None and row["sent_ns"] is not None:
            self.recent_ttft_ms.append((row["first_token_ns"] - row["sent_ns"]) / 1e6)
        self._add(records.REQUESTS_FILE, [row])
        return row

    def add_session(self, row: dict[str, Any]) -> None:
        self._add(records.SESSIONS_FILE, [row])

    def add_server_samples(self, rows: list[dict[str, Any]] | SampleBlock) -> None:
        """One scrape's samples (rows, or a simulator's sample as columns): journaled in
        one write, spooled by the flush loop."""
        if len(rows):
            self._add(records.SERVER_METRICS_FILE, rows, batch=False)

    def _add(self, name: str, rows: list[dict[str, Any]] | SampleBlock,
             batch: bool = True) -> None:
        """Journal ``rows`` (row dicts or a sample block) in ``name``'s spool; spool the
        buffered rows at ``flush_rows`` (``batch``) or every ``flush_every_rows``."""
        spool = self._spools[name]
        if spool.failed is not None:
            self.lost += len(rows)
            return
        try:
            if isinstance(rows, SampleBlock):
                spool.add_block(rows)
            else:
                spool.add(*rows)
            if batch and spool.pending >= self.flush_rows:
                spool.flush()
        except ResultsWriteError as e:
            self._failed(e)
        if self.flush_every_rows is not None:
            self._unflushed += len(rows)
            if self._unflushed >= self.flush_every_rows:
                self._unflushed = 0
                self.flush()
        if self.on_tick is None:
            return
        now = time.monotonic()
        if now - self._ticked_at >= TICK_EVERY_S:
            self._ticked_at = now
            self.tick()

    def tick(self) -> None:
        """Call ``on_tick``; one that fails (a progress display on a closed stderr) is
        dropped, never the run: it is a display, as the loop that drew it was."""
        try:
            if self.on_tick is not None:
                self.on_tick()
        except Exception:
            self.on_tick = None

    def flush(self) -> None:
        for s in self._spools.values():
            try:
                s.flush()
            except ResultsWriteError as e:
                self._failed(e)

    @property
    def kept(self) -> int:
        """Request rows on disk (in the spool, or in the journal a reader recovers)."""
        spool = self._spools[records.REQUESTS_FILE]
        return max(spool.written, spool.journaled)

    def _failed(self, e: ResultsWriteError) -> None:
        if self.failure is None:
            self.failure = e
            if self.on_failure is not None:
                self.on_failure(e)

    def close(self) -> None:
        """Write the parquet files (idempotent). A file the disk refuses keeps its spool
        (``agentbench recover`` finishes it) and sets ``failure``; nothing is raised."""
        if self.closed:
            return
        self.closed = True
        for name, s in self._spools.items():
            try:
                s.close(self.run_dir / name)
            except ResultsWriteError as e:
                self._failed(e)
        if self.failure is not None:
            self.failure.kept = self.kept
            self.failure.args = (self.failure.one_line(),)
