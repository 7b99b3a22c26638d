"""A results table's journal (``<table>.journal.jsonl``, beside its spool: ``spool``): its
``<seq> <json>`` lines, written as rows finish (``agentbench.results.writer``). How a NaN or
an infinity is written there as text, and how the rows its spool lacks are read back (a
line cut short by a kill, or a row that does not fit the schema, left out)."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

#: how the journal writes a float JSON cannot hold (``nonfinite_as_text``)
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def float_columns(schema: pa.Schema) -> tuple[str, ...]:
    """The schema's floating-point columns (a journal line may hold their NaN as text)."""
    return tuple(f.name for f in schema if pa.types.is_floating(f.type))


def nonfinite_text(v: float) -> str:
    """How a journal line holds a NaN or an infinity: ``NaN``, ``Infinity``, ``-Infinity``
    (read back by ``journal_rows``)."""
    return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")


def nonfinite_as_text(row: dict[str, Any], floats: tuple[str, ...]) -> dict[str, Any]:
    """``row`` for its journal line: a NaN or infinite value of ``floats`` as its
    ``nonfinite_text`` (a copy; the row itself when there is none)."""
    out = row
    for k in floats:
        v = row.get(k)
        if isinstance(v, float) and not math.isfinite(v):
            if out is row:
                out = dict(row)
            out[k] = nonfinite_text(v)
    return out


def journal_rows(journal: Path, after: int, schema: pa.Schema) -> list[pa.RecordBatch]:
    """Rows of a journal (``<seq> <json>`` lines) that the spool lacks (``seq >= after``).
    A line cut short by the kill, or one that does not fit the schema, is left out. A
    server-metrics sample's block line (``agentbench.results.samples``) holds the rows
    ``seq``, ``seq + 1``, ... of its series."""
    rows: list[dict[str, object]] = []
    maps = [f.name for f in schema if pa.types.is_map(f.type)]  # JSON made the pairs lists
    floats = float_columns(schema)
    with contextlib.suppress(OSError), open(journal, "rb") as f:
        for line in f:
            seq, _, text = line.partition(b" ")
            try:
                first = int(seq)
                if first < after and b'"series"' not in text:
                    continue  # (a block line's later rows may be past ``after``; its key
                    # is looked for without the colon, however the line is spaced)
                obj = orjson.loads(text)
            except (ValueError, orjson.JSONDecodeError):
                continue
            if not isinstance(obj, dict):
                continue
            block = _block_rows(obj)  # a server-metrics sample's rows, on one line
            for i, row in enumerate([obj] if block is None else block):
                if first + i < after:
                    continue
                for name in floats:  # NaN and infinities, written as text
                    v = row.get(name)
                    if isinstance(v, str) and v in _NONFINITE:
                        row[name] = _NONFINITE[v]
                for name in maps:
                    if isinstance(row.get(name), list):
                        row[name] = [tuple(kv) if isinstance(kv, list) else kv
                                     for kv in row[name]]
                rows.append(row)
    try:
        batch = pa.RecordBatch.from_pylist(rows, schema=schema) if rows else None
        if batch is None or _complete(batch):
            return [batch] if batch is not None else []
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    out = []  # one bad row (a type Arrow refuses, a required column missing): keep the others
    for row in rows:
        with contextlib.suppress(pa.ArrowException, TypeError, ValueError, OverflowError):
            one = pa.RecordBatch.from_pylist([row], schema=schema)
            if _complete(one):
                out.append(one)
    return out


#: the keys of a block line's object (``agentbench.results.samples.SampleBlock.journal``)
_BLOCK_KEYS = {"endpoint", "series", "time_ns", "values"}


def _block_rows(line: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The rows of a block line's object, in its series' order; None when ``line`` is not
    one (a row's line), and no row when its series and values do not pair up."""
    if line.keys() != _BLOCK_KEYS:
        return None
    series, values, t, ep = line["series"], line["values"], line["time_ns"], line["endpoint"]
    if not isinstance(series, list) or not isinstance(values, list) \
            or len(series) != len(values) \
            or not all(isinstance(s, list) and len(s) == 2 for s in series):
        return []
    return [{"time_ns": t, "endpoint": ep, "name": s[0], "labels": s[1], "value": v}
            for s, v in zip(series, values, strict=True)]


def _complete(batch: pa.RecordBatch) -> bool:
    """Whether no column the schema declares non-nullable holds a null (Arrow fills a
    missing key with null without complaint; writing the file would then fail)."""
    return all(batch.column(i).null_count == 0
               for i, f in enumerate(batch.schema) if not f.nullable)
