"""A request row's times in the order a request lives them, checked when a run is read.

Every writer stamps ``sent_ns`` before the request's first byte is written, each token
event at the read that brought it, and ``end_ns`` at the read that ended the answer (or
when it failed), all on one clock, so ``sent_ns <= first_token_ns <= last_token_ns <=
end_ns`` in every row it writes. A requests.parquet edited by hand, or put together from
two runs, can break that: ``load`` then gave a TTFT of -999,523 ms without a word, and
``report`` a numpy traceback ("`bins` must increase monotonically"). The token events of a
row come in order too, each with a count from 0: reversed events, or a count of -7,
moved the ITL percentiles without a word. One line names the row and the columns
(docs/reliability.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agentbench.errors import InputError

#: each (earlier, later) pair of a row's stamps; a null (never sent, no token) is no time
ORDER = (("sent_ns", "first_token_ns"), ("first_token_ns", "last_token_ns"),
         ("last_token_ns", "end_ns"), ("sent_ns", "end_ns"))


def check_row_times(table: pa.Table, path: Path) -> None:
    """Raise an ``InputError`` naming the first row whose stamps are out of order."""
    for earlier, later in ORDER:
        back = pc.less(table.column(later), table.column(earlier))
        if not pc.any(back, skip_nulls=True).as_py():
            continue
        row = int(pc.index(back, True).as_py())
        a, b = table.column(earlier)[row].as_py(), table.column(later)[row].as_py()
        raise InputError(f"{b} is before {earlier} {a}: a request is sent, gets its "
                         "first and last token, then ends (a table edited by hand?)",
                         source=str(path), where=f"row {row}", field=later)


def check_events(table: pa.Table, path: Path) -> None:
    """Raise an ``InputError`` naming the first row whose token events go back in time
    or carry a negative count (vectorized over the events of each chunk of rows)."""
    row0 = 0
    ns_chunks = table.column("token_event_ns").chunks
    tok_chunks = table.column("token_event_tokens").chunks
    for ns, tok in zip(ns_chunks, _aligned(tok_chunks, ns_chunks), strict=True):
        lengths = pc.fill_null(pc.list_value_length(ns), 0).to_numpy()
        flat = pc.list_flatten(ns).to_numpy(zero_copy_only=False)
        back = np.diff(flat) < 0
        firsts = np.cumsum(lengths)[:-1]
        back[firsts[(firsts > 0) & (firsts < len(flat))] - 1] = False  # a row's first event
        if back.any():
            raise InputError("token events out of order: each comes at or after the one "
                             "before it", source=str(path),
                             where=f"row {row0 + _row_of(lengths, int(back.argmax()) + 1)}",
                             field="token_event_ns")
        neg = pc.list_flatten(tok).to_numpy(zero_copy_only=False) < 0
        if neg.any():
            lengths = pc.fill_null(pc.list_value_length(tok), 0).to_numpy()
            raise InputError("a negative token count", source=str(path),
                             where=f"row {row0 + _row_of(lengths, int(neg.argmax()))}",
                             field="token_event_tokens")
        row0 += len(ns)


def _aligned(chunks: list[pa.Array], like: list[pa.Array]) -> list[pa.Array]:
    """``chunks`` cut at the row boundaries of ``like`` (two columns of one table are
    chunked alike when read from parquet; this is for a table built otherwise)."""
    if [len(c) for c in chunks] == [len(c) for c in like]:
        return chunks
    whole = pa.concat_arrays(chunks) if chunks else pa.array([], pa.list_(pa.int32()))
    cuts = np.cumsum([0, *(len(c) for c in like)])
    return [whole.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _row_of(lengths: np.ndarray, k: int) -> int:
    """The row that holds flattened element ``k``, given each row's list length."""
    return int(np.searchsorted(np.cumsum(lengths), k, side="right"))
