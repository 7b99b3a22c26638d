"""Mooncake FAST'25 traces: JSONL, one request per line with ``timestamp`` (ms),
``input_length``, ``output_length`` and ``hash_ids`` (``block_size`` 512 tokens); optional
``session_id`` and ``delay`` (ms, the think time before the turn, as aiperf's multi-turn
Mooncake files carry it).

Without ``session_id`` every request is a one-turn root session starting at its timestamp.
With it, a session's requests become its turns in timestamp order (a later turn may give
only ``delay``: it then starts ``delay`` after the previous one); think time is ``delay``
when given, else the start-to-start gap (the trace records no response time); lines of a
session may come in any order, but a negative timestamp is an error. One hash
scope per file. Reading is columnar so that read + stats stays close to the cost of
decoding the JSON.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.traces import MAX_TOKENS
from agentbench.traces.model import MAX_SECONDS, Session, Trace, Turn
from agentbench.traces.readers import read_files
from agentbench.traces.readers._fields import (
    check_block_size,
    json_problem,
    opt_num,
    req_hash_ids,
    req_num,
    req_tokens,
)
from agentbench.traces.readers._text import reject_unknown

BLOCK_SIZE = 512
_NUMBER = (int, float)
#: timestamps at or above this (or not a number: NaN, infinity, 10**400) take the careful
#: path, which names them
_BIG = 1e300


def read(source: str | Path, *, block_size: int = BLOCK_SIZE, skip_bad: bool = False,
         **options: Any) -> Trace:
    """Read one Mooncake JSONL file or a folder of them (one hash scope per file)."""
    reject_unknown(options, "mooncake")
    check_block_size(block_size)
    path = Path(source)
    # The reader makes millions of small acyclic objects: the cyclic collector's passes
    # over them would cost more than the parsing.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        per_file, skipped = read_files(path, (".jsonl", ".json"),
                                       lambda f: _read_file(f, block_size), skip_bad=skip_bad)
    finally:
        if was_enabled:
            gc.enable()
    sessions = [s for ss in per_file for s in ss]
    _unique_ids(sessions)
    return Trace(sessions, name=path.stem, skipped=skipped)



def _unique_ids(sessions: list[Session]) -> None:
    seen: set[str] = set()
    for s in sessions:
        if s.session_id in seen:
            raise InputError(f"session id {s.session_id!r} used again", source=s.scope,
                             field="session_id")
        seen.add(s.session_id)


def read_records(records: Iterable[dict[str, Any]], *, source: str,
                 block_size: int = BLOCK_SIZE, **options: Any) -> Trace:
    """Read decoded records (e.g. Hugging Face dataset rows) as one Mooncake file."""
    reject_unknown(options, "mooncake")
    check_block_size(block_size)
    cols = _Columns(block_size)
    for i, rec in enumerate(records):
        cols.add(rec, f"record {i}", source)
    sessions = cols.sessions(source, block_size)
    _unique_ids(sessions)
    return Trace(sessions, name=Path(source).name or source)


def _read_file(file: Path, block_size: int) -> list[Session]:
    cols = _Columns(block_size)
    with file.open("rb") as f:
        data = f.read()
    body = data.strip()
    if body and b"\n\n" not in body and b"\r" not in body:
        # plain JSONL: one decode of the whole file as an array, twice as fast as line by
        # line; any surprise (blank or broken lines) falls through to the careful path
        try:
            recs = json.loads(b"[" + body.replace(b"\n", b",") + b"]")
        except (ValueError, RecursionError):  # bad JSON or UTF-8, deep nesting
            recs = None
        if recs is not None and len(recs) == body.count(b"\n") + 1:
            first_line = data[: len(data) - len(data.lstrip())].count(b"\n") + 1
            cols.add_many(recs, first_line, str(file))
            return cols.sessions(str(file), block_size)
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise InputError(f"invalid JSON ({json_problem(e)})", source=str(file),
                             where=f"line {lineno}") from None
        cols.add(rec, lineno, str(file))
    return cols.sessions(str(file), block_size)


class _Columns:
    """Requests of one file, column by column."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.ts: list[float] = []
        self.inp: list[int] = []
        self.out: list[int] = []
        self.hashes: list[list[int]] = []
        self.where: list[str | int] = []
        self.sid: list[Any] = []
        self.delay: list[float | None] = []
        self.has_sessions = False

    def add(self, rec: Any, where: str | int, source: str) -> None:
        try:
            ts = rec["timestamp"]
            inp = rec["input_length"]
            out = rec["output_length"]
            h = rec["hash_ids"]
        except (KeyError, TypeError):
            ts = inp = out = h = None
        if (type(ts) not in _NUMBER or type(inp) is not int or type(out) is not int
                or type(h) is not list or not 0 <= inp <= MAX_TOKENS
                or not 0 <= out <= MAX_TOKENS or not 0 <= ts < _BIG or len(rec) > 4):
            ts, inp, out, h = self._slow(rec, where, source)
        elif self.has_sessions:
            self.sid.append(None)
            self.delay.append(None)
        self.ts.append(ts)
        self.inp.append(inp)
        self.out.append(out)
        self.hashes.append(h)
        self.where.append(where)

    def add_many(self, recs: list[Any], first_line: int, source: str) -> None:
        """``add`` for consecutive lines, with the common shape checked inline."""
        ts_a, inp_a, out_a = self.ts.append, self.inp.append, self.out.append
        h_a, w_a = self.hashes.append, self.where.append
        for lineno, rec in enumerate(recs, first_line):
            if type(rec) is dict and len(rec) == 4 and not self.has_sessions:
                try:
                    ts = rec["timestamp"]
                    inp = rec["input_length"]
                    out = rec["output_length"]
                    h = rec["hash_ids"]
                except KeyError:
                    self.add(rec, lineno, source)
                    continue
                if (type(ts) in _NUMBER and type(inp) is int and type(out) is int
                        and type(h) is list and 0 <= inp <= MAX_TOKENS
                        and 0 <= out <= MAX_TOKENS and 0 <= ts < _BIG):
                    ts_a(ts)
                    inp_a(inp)
                    out_a(out)
                    h_a(h)
                    w_a(lineno)
                    continue
            self.add(rec, lineno, source)

    def _slow(self, rec: Any, where_: str | int, source: str
              ) -> tuple[float, int, int, list[int]]:
        """Full checks (and optional fields) for a record off the common shape."""
        where = _where(where_)
        if not isinstance(rec, dict):
            raise InputError("expected a JSON object", source=source, where=where)
        try:
            sid = rec.get("session_id")
            if sid is not None and type(sid) not in (str, int):  # a list was a traceback
                raise InputError(f"expected a string or an integer, got {sid!r}",
                                 field="session_id")
            delay = opt_num(rec, "delay", nonneg=True)
            # a later turn of a session may be placed by its delay alone
            placed = sid is not None and "timestamp" not in rec
            ts = math.nan if placed else req_num(rec, "timestamp", nonneg=True)
            inp = req_tokens(rec, "input_length")
            out = req_tokens(rec, "output_length")
            h = req_hash_ids(rec, tokens=inp, block_size=self.block_size).tolist()
        except InputError as e:
            raise e.located(source=source, where=where) from None
        if (sid is not None or delay is not None) and not self.has_sessions:
            self.has_sessions = True
            self.sid = [None] * len(self.ts)
            self.delay = [None] * len(self.ts)
        if self.has_sessions:
            self.sid.append(sid)
            self.delay.append(delay)
        return ts, inp, out, h

    def sessions(self, source: str, block_size: int) -> list[Session]:
        n = len(self.ts)
        if n == 0:
            raise InputError("no requests", source=source)
        inp = np.asarray(self.inp, dtype=np.int64)
        ts = np.asarray(self.ts, dtype=np.float64)
        lengths = np.fromiter(map(len, self.hashes), dtype=np.int64, count=n)
        allowed = (inp + block_size - 1) // block_size
        bad = np.flatnonzero(lengths > allowed)
        if bad.size:
            i = int(bad[0])
            raise InputError(
                f"{lengths[i]} hash ids but {inp[i]} input tokens allow at most {allowed[i]} "
                f"blocks of {block_size}", source=source, where=_where(self.where[i]),
                field="hash_ids")
        total = int(lengths.sum())
        types = set(map(type, itertools.chain.from_iterable(self.hashes)))
        if types - {int}:
            for i, h in enumerate(self.hashes):
                if not all(type(v) is int for v in h):
                    raise InputError("expected a list of integers", source=source,
                                     where=_where(self.where[i]), field="hash_ids")
        try:
            flat = np.fromiter(itertools.chain.from_iterable(self.hashes), dtype=np.int64,
                               count=total)
        except OverflowError:
            i = next(i for i, h in enumerate(self.hashes)
                     if any(not -(1 << 63) <= v < (1 << 63) for v in h))
            raise InputError("hash id outside 64-bit integers", source=source,
                             where=_where(self.where[i]), field="hash_ids") from None
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        t0 = float(np.nanmin(ts)) if not np.all(np.isnan(ts)) else 0.0
        self._check_span(ts, t0, source)
        stem = Path(source).stem
        src = f"{source}#mooncake"
        if not self.has_sessions:
            start = ((ts - t0) / 1000.0).tolist()
            out_l = self.out
            inp_l = self.inp
            off = offsets.tolist()
            return [
                Session(f"{stem}:{i}", None, "root", None, None, None, src, source, start[i],
                        [Turn(0, 0.0, 0.0, None, inp_l[i], out_l[i], flat[off[i]:off[i + 1]],
                              block_size)])
                for i in range(n)
            ]
        return self._grouped(ts, t0, flat, offsets, stem, src, source, block_size)

    def _grouped(self, ts: np.ndarray, t0: float, flat: np.ndarray, offsets: np.ndarray,
                 stem: str, src: str, source: str, block_size: int) -> list[Session]:
        groups: dict[Any, list[int]] = {}
        for i, sid in enumerate(self.sid):
            groups.setdefault(("row", i) if sid is None else sid, []).append(i)
        out: list[Session] = []
        for key, rows in groups.items():
            # place delay-only turns after their predecessor, then order by timestamp
            for a, b in zip(rows, rows[1:], strict=False):
                if math.isnan(ts[b]):
                    d = self.delay[b]
                    if d is None:
                        raise InputError("missing (and no delay)", source=source,
                                         where=_where(self.where[b]), field="timestamp")
                    ts[b] = ts[a] + d
            if math.isnan(ts[rows[0]]):
                raise InputError("missing on a session's first request", source=source,
                                 where=_where(self.where[rows[0]]), field="timestamp")
            rows = sorted(rows, key=lambda r: ts[r])
            first = float(ts[rows[0]])
            turns = []
            for k, r in enumerate(rows):
                d = self.delay[r]
                if k == 0:
                    think = 0.0
                elif d is not None:
                    think = d / 1000.0
                else:
                    think = (float(ts[r]) - float(ts[rows[k - 1]])) / 1000.0
                turns.append(Turn(k, (float(ts[r]) - first) / 1000.0, think, None,
                                  self.inp[r], self.out[r], flat[offsets[r]:offsets[r + 1]],
                                  block_size))
            sid = f"{stem}:{rows[0]}" if isinstance(key, tuple) else str(key)
            out.append(Session(sid, None, "root", None, None, None, src, source,
                               (first - t0) / 1000.0, turns))
        self._check_span(ts, t0, source)  # again, with the turns the delays placed
        return out


    def _check_span(self, ts: np.ndarray, t0: float, source: str) -> None:
        """Every timestamp within ``MAX_SECONDS`` of the first (the run counts integer
        nanoseconds: 1e13 ms would overflow them), else one error naming the line."""
        span = (ts - t0) / 1000.0
        over = np.flatnonzero(span > MAX_SECONDS)  # NaN (placed by a delay later) is not
        if over.size:
            i = int(over[0])
            raise InputError(f"{float(ts[i]):g} ms is {float(span[i]):g} s after the trace's "
                             f"first request, over the {MAX_SECONDS:g} s a recorded time may "
                             "be", source=source, where=_where(self.where[i]),
                             field="timestamp")


def _where(w: str | int) -> str:
    return f"line {w}" if isinstance(w, int) else w
