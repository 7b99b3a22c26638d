"""A request row's times in the order a request lives them, checked when a run is read.

Every writer stamps ``sent_ns`` before the request's first byte is written, each token
event at the read that brought it, and ``end_ns`` at the read that ended the answer (or
when it failed), all on one clock, so ``sent_ns <= first_token_ns <= last_token_ns <=
end_ns`` in every row it writes. A requests.parquet edited by hand, or put together from
two runs, can break that: ``load`` then gave a TTFT of -999,523 ms without a word, and
``report`` a numpy traceback ("`bins` must increase monotonically"). One line names the
row and the two columns (docs/reliability.md).
"""

from __future__ import annotations

from pathlib import Path

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
