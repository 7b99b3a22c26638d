"""The native reader: a read that ran out of memory is not a bad file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import native
from agentbench.traces.synth import synthesize


@pytest.mark.parametrize("step", ["open", "sessions", "batches"])
def test_out_of_memory_while_reading_is_no_bad_file(tmp_path: Path, step: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``ulimit -v`` pyarrow's ArrowMemoryError ('malloc of size 309824 failed') was
    an InputError, 'not a readable parquet file', exit 2: the bundled trace blamed for the
    memory. It is a MemoryError now (the command line's 'out of memory', exit 1)."""
    path = native.write(synthesize("codex", 2, 0), tmp_path / "t.parquet")
    native.read(path)  # readable as it stands

    def refused(*args: object, **kwargs: object) -> None:
        raise pa.lib.ArrowMemoryError("malloc of size 309824 failed")

    target = {"open": (native.pq, "ParquetFile"), "sessions": (native.pa.ipc, "open_stream"),
              "batches": (pq.ParquetFile, "iter_batches")}[step]
    monkeypatch.setattr(*target, refused)
    with pytest.raises(MemoryError, match="malloc of size 309824 failed") as caught:
        native.read(path)
    assert not isinstance(caught.value, InputError)
