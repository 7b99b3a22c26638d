"""Server-metrics samples of a fixed set of series, kept as columns
(docs/architecture.md#results-on-disk).

A virtual-time run samples the simulator every few simulated seconds, and each sample is the
same series (name and labels) with new values: 60 series an instance, 18,000 rows in the
quickstart. As dicts, each row was built, journaled by ``orjson`` and converted by Arrow one
at a time, a fifth to a quarter of a small what-if's CPU. A :class:`SampleBlock` is one
sample as its time, its endpoint and a list of values over a :class:`SeriesLayout` made
once per run; the writer spools it as columns, and journals it as one line (a *block
line*, ``<seq> {"endpoint":..,"series":[[name, labels], ..],"time_ns":..,"values":[..]}``,
its rows numbered from ``seq``), whose text up to the time is made once per series layout.
``agentbench.results.journal.journal_rows`` reads a block line back as exactly the rows of
``SampleBlock.rows()``, as it reads a row's line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from agentbench.results.journal import nonfinite_text

Labels = list[tuple[str, str]]


class SeriesLayout:
    """The series of every sample of one source: names and labels, in a fixed order."""

    def __init__(self, names: Sequence[str], labels: Sequence[Labels]) -> None:
        if len(names) != len(labels):
            raise ValueError("one labels list per series name")
        self.names = list(names)
        self.labels = list(labels)
        self._heads: dict[str, bytes] = {}
        self._columns: tuple[pa.Array, pa.Array] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def head(self, endpoint: str) -> bytes:
        """A block line's text from its sequence number to its time: `` {"endpoint":..,
        "series":[[name, labels], ..],"time_ns":`` (made once per endpoint)."""
        got = self._heads.get(endpoint)
        if got is None:
            got = self._heads[endpoint] = b" " + orjson.dumps(
                {"endpoint": endpoint, "series": [[n, lab] for n, lab in
                                                  zip(self.names, self.labels, strict=True)]}
            )[:-1] + b',"time_ns":'
        return got

    def columns(self, schema: pa.Schema) -> tuple[pa.Array, pa.Array]:
        """The ``name`` and ``labels`` columns of one sample, as Arrow arrays (made once)."""
        if self._columns is None:
            self._columns = (pa.array(self.names, type=schema.field("name").type),
                             pa.array(self.labels, type=schema.field("labels").type))
        return self._columns


class SampleBlock:
    """One sample: ``values[i]`` is series ``i`` of ``layout`` at ``time_ns``."""

    __slots__ = ("endpoint", "layout", "time_ns", "values")

    def __init__(self, layout: SeriesLayout, time_ns: int, endpoint: str,
                 values: list[float]) -> None:
        if len(values) != len(layout):
            raise ValueError(f"{len(values)} values for {len(layout)} series")
        self.layout = layout
        self.time_ns = time_ns
        self.endpoint = endpoint
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def rows(self) -> list[dict[str, Any]]:
        """The rows this block stands for (``server_metrics.parquet``'s schema)."""
        t, ep, lay = self.time_ns, self.endpoint, self.layout
        return [{"time_ns": t, "endpoint": ep, "name": n, "labels": lab, "value": v}
                for n, lab, v in zip(lay.names, lay.labels, self.values, strict=True)]

    def journal(self, first: int) -> bytes:
        """The block's journal line, its rows numbered from ``first`` (one line for all of
        them: the rows' own lines were 8 KB a sample of the quickstart's 53 series, and
        made in Python a row). A NaN or infinite value is written as its text, as the
        writer journals a row's."""
        if not self.values:
            return b""
        vals = orjson.dumps(self.values)
        if b"null" in vals:  # NaN or an infinity: orjson's null
            vals = orjson.dumps([v if math.isfinite(v) else nonfinite_text(v)
                                 for v in self.values])
        return b"%d%s%d,\"values\":%s}\n" % (first, self.layout.head(self.endpoint),
                                              self.time_ns, vals)


def blocks_batch(blocks: Sequence[SampleBlock], schema: pa.Schema) -> pa.RecordBatch:
    """The rows of ``blocks`` as one record batch of ``schema`` (server metrics): the
    same values ``pa.RecordBatch.from_pylist`` gives for ``rows()``, built as columns."""
    counts = np.fromiter((len(b) for b in blocks), np.int64, len(blocks))
    times = np.repeat(np.fromiter((b.time_ns for b in blocks), np.int64, len(blocks)), counts)
    endpoints = pa.array([b.endpoint for b in blocks], type=pa.string())
    names, labels = [], []
    for b in blocks:
        name, lab = b.layout.columns(schema)
        names.append(name)
        labels.append(lab)
    values = [v for b in blocks for v in b.values]
    cols = {"time_ns": pa.array(times, type=schema.field("time_ns").type),
            "endpoint": endpoints.take(pa.array(np.repeat(np.arange(len(blocks)), counts))),
            "name": pa.concat_arrays(names) if names else pa.array([], pa.string()),
            "labels": pa.concat_arrays(labels) if labels else
            pa.array([], schema.field("labels").type),
            "value": pa.array(values, type=schema.field("value").type)}
    return pa.RecordBatch.from_arrays([cols[n] for n in schema.names], schema=schema)
