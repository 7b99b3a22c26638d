"""Where a command may write a trace file (``-o`` of ``record``, ``traces convert`` and
``traces synth``): a file name, not '' or a folder, and nothing at that name yet, so an
earlier trace or recording is never lost. Folders missing above it are made when it is
written."""

from __future__ import annotations

import os
from pathlib import Path

from agentbench.errors import InputError

#: suffixes of other formats, refused for a native parquet trace
OTHER_FORMATS = frozenset({".jsonl", ".json", ".ndjson", ".csv", ".gz", ".zst", ".yaml",
                           ".yml", ".txt", ".arrow", ".feather"})


def check_file_name(out: Path) -> None:
    """``-o ''`` (the current folder), ``.`` or a folder is no file name: one line."""
    if not out.name or out.is_dir():
        raise InputError("give a file name for the trace (e.g. -o agent.parquet)",
                         source=str(out), field="output")


def check_parquet_name(out: Path) -> None:
    """A trace written as native parquet is not named for another format (``t.jsonl``,
    ``t.parquet.gz``): every reader would be misled. One line with the name to use."""
    if out.suffix.lower() not in OTHER_FORMATS:
        return
    stem = out.name
    while Path(stem).suffix.lower() in OTHER_FORMATS | {".parquet"}:
        stem = Path(stem).stem
    raise InputError(f"the trace is written as native parquet, not {out.suffix}; name it "
                     f"{stem or 'trace'}.parquet", source=str(out), field="output")


def check_new(*paths: Path, hint: str = "") -> None:
    """Refuse to overwrite: one line naming the first of ``paths`` that exists (a link
    too, even one that leads nowhere); ``hint`` ends the line."""
    for p in paths:
        if os.path.lexists(p):
            raise InputError(f"exists; pick another -o or remove it{hint}", source=str(p))
