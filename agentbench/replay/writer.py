"""Results as the run goes (CONTRACTS §6): finished rows are buffered, written in batches to
an Arrow IPC spool, and converted to parquet when the run ends (normally, on Ctrl-C or on
a crash). A spool left by a killed process is converted by ``agentbench.spool.recover``,
which every reader calls.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from agentbench import records
from agentbench.spool import SPOOL_SUFFIX, recover, spool_to_parquet
from agentbench.transport.http import RequestRecord
from agentbench.transport.sse import parse_stream

__all__ = ["SPOOL_SUFFIX", "ResultsWriter", "finish_record", "recover", "spool_to_parquet"]


def finish_record(rec: RequestRecord) -> dict[str, Any]:
    """The requests.parquet row of a finished request: the raw stream read into events,
    tokens and usage (CONTRACTS §4). Frees the raw chunks."""
    row: dict[str, Any] = {
        "request_id": rec.request_id, "stage": rec.stage, "phase": rec.phase,
        "endpoint": rec.endpoint, "lane": rec.lane, "tree_id": rec.tree_id,
        "session_id": rec.session_id, "relation": rec.relation, "copy": rec.copy,
        "turn": rec.turn, "scheduled_ns": rec.scheduled_ns, "sent_ns": rec.sent_ns,
        "first_token_ns": None, "last_token_ns": None, "end_ns": rec.end_ns,
        "token_events": None, "token_event_ns": None, "token_event_tokens": None,
        "prompt_tokens": None, "completion_tokens": None, "cached_tokens": None,
        "expected_input_tokens": rec.expected_input_tokens,
        "expected_output_tokens": rec.expected_output_tokens,
        "potential_cached_tokens": rec.potential_cached_tokens,
        "status": rec.status, "http_status": rec.http_status,
        "error_type": rec.error_type, "error_message": rec.error_message,
    }
    if rec.http_status == 200 and (rec.chunks or rec.result is not None
                                   or rec.status == records.OK):
        st = rec.result if rec.result is not None else parse_stream(rec.chunks, rec.chunk_ns)
        ev = st.token_event_ns
        row["token_events"] = len(ev)
        row["token_event_ns"] = ev
        row["token_event_tokens"] = st.token_event_tokens
        if ev:
            row["first_token_ns"] = ev[0]
            row["last_token_ns"] = ev[-1]
        row["prompt_tokens"] = st.prompt_tokens
        row["completion_tokens"] = st.completion_tokens
        row["cached_tokens"] = st.cached_tokens
        if rec.status == records.OK and st.error_type is not None:
            row["status"] = records.ERROR
            row["error_type"] = st.error_type
            row["error_message"] = st.error_message
    rec.chunks = []
    rec.chunk_ns = []
    rec.result = None
    return row


class _Spool:
    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows: list[dict[str, Any]] = []
        self._sink: Any = None
        self._writer: ipc.RecordBatchStreamWriter | None = None
        self.written = 0

    def flush(self) -> None:
        if not self.rows:
            return
        batch = pa.RecordBatch.from_pylist(self.rows, schema=self.schema)
        if self._writer is None:
            self._sink = pa.OSFile(str(self.path), "wb")
            self._writer = ipc.new_stream(self._sink, self.schema)
        self._writer.write_batch(batch)
        self._sink.flush()
        self.written += len(self.rows)
        self.rows = []

    def close(self, out: Path) -> None:
        self.flush()
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
        spool_to_parquet(self.path, out, self.schema)


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

    def add_request(self, rec: RequestRecord) -> dict[str, Any]:
        row = finish_record(rec)
        self.n_requests += 1
        if row["status"] != records.OK:
            self.n_errors += 1
        elif row["first_token_ns"] is not None and row["sent_ns"] is not None:
            self.recent_ttft_ms.append((row["first_token_ns"] - row["sent_ns"]) / 1e6)
        self._add(records.REQUESTS_FILE, row)
        return row

    def add_session(self, row: dict[str, Any]) -> None:
        self._add(records.SESSIONS_FILE, row)

    def add_server_samples(self, rows: list[dict[str, Any]]) -> None:
        spool = self._spools[records.SERVER_METRICS_FILE]
        spool.rows.extend(rows)

    def _add(self, name: str, row: dict[str, Any]) -> None:
        spool = self._spools[name]
        spool.rows.append(row)
        if len(spool.rows) >= self.flush_rows:
            spool.flush()

    def flush(self) -> None:
        for s in self._spools.values():
            s.flush()

    def close(self) -> None:
        """Write the parquet files (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for name, s in self._spools.items():
            s.close(self.run_dir / name)
