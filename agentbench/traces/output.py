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
    """``-o ''`` (the current folder), ``.`` or a folder is no file name, and a name ending
    in another format's suffix (``.jsonl``) would mislead: one line."""
    if not out.name or out.is_dir():
        raise InputError("give a file name for the trace (e.g. -o agent.parquet)",
                         source=str(out), field="output")
    if out.suffix.lower() in OTHER_FORMATS:
        # the file is parquet whatever its name: named .jsonl it would mislead every reader
        raise InputError(f"the trace is written as native parquet, not {out.suffix}; name it "
                         f"{out.with_suffix('.parquet').name}", source=str(out), field="output")


def check_new(*paths: Path, hint: str = "") -> None:
    """Refuse to overwrite: one line naming the first of ``paths`` that exists (a link
    too, even one that leads nowhere); ``hint`` ends the line."""
    for p in paths:
        if os.path.lexists(p):
            raise InputError(f"exists; pick another -o or remove it{hint}", source=str(p))
