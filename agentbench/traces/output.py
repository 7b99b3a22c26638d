"""Where a command may write a trace file (``-o`` of ``record``, ``traces convert`` and
``traces synth``): a file name, not '' or a folder, and nothing at that name yet, so an
earlier trace or recording is never lost. Folders missing above it are made when it is
written, before the trace is read; the file is written beside it and takes its name
whole."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from agentbench.errors import InputError

#: suffixes of other formats, refused for a native parquet trace
OTHER_FORMATS = frozenset({".jsonl", ".json", ".ndjson", ".csv", ".gz", ".zst", ".yaml",
                           ".yml", ".txt", ".arrow", ".feather"})


def check_file_name(out: Path) -> None:
    """``-o ''`` (the current folder), ``.``, ``x/..`` or a folder is no file name: one
    line."""
    try:
        # 'x/..' names a folder even where x is not there yet
        folder = out.name in ("", "..") or out.is_dir()
    except OSError as e:  # a name the file system refuses (ENAMETOOLONG)
        raise InputError(f"no file can have this name ({e.strerror or e})",
                         source=str(out), field="output") from None
    if folder:
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


def check_folder(out: Path, field: str = "output") -> None:
    """The folder ``out`` goes in, or the nearest one above it that is there (the missing
    ones are made when the file is written): a folder that takes new files. One line
    naming ``-o`` (``field``; exit 2) before the read or the recording, where it was an
    OSError after them (exit 1: ``f.txt/t.parquet``, ``/proc/t.parquet``). Nothing is
    made, so a read that fails leaves no folder behind."""
    import tempfile

    there = out.parent
    while not os.path.lexists(there):  # '.' and '/' are there
        there = there.parent
    if not there.is_dir():
        raise InputError(f"{str(there)!r} is a file or a link, not a folder",
                         source=str(out), field=field)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name[:32]}.", dir=there))
    except OSError as e:
        raise InputError(f"cannot write a file in {str(there)!r} ({e.strerror or e})",
                         source=str(out), field=field) from None


@contextlib.contextmanager
def new_file(out: Path) -> Iterator[Path]:
    """A path to write the file at, in a fresh owner-only folder beside ``out``; once the
    block ends, the file takes the name ``out`` whole, never replacing anything that came
    there meanwhile (a file, a link) and never followed through a link. A block that
    raises (a bad trace, Ctrl-C, a full disk) leaves nothing at ``out`` (a cut file there
    made the next try refuse it as existing), nor the folders made for it."""
    import tempfile

    made = [p for p in [out.parent, *out.parent.parents] if not os.path.lexists(p)]
    out.parent.mkdir(parents=True, exist_ok=True)
    done = False
    try:
        with tempfile.TemporaryDirectory(prefix=f".{out.name[:32]}.",
                                         dir=out.parent) as folder:
            tmp = Path(folder) / "trace.parquet"
            yield tmp
            try:  # a placeholder made only where nothing is, then replaced whole
                os.close(os.open(out, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                raise InputError("came into being while the trace was made; not replaced: "
                                 "pick another -o", source=str(out), field="output") from None
            os.replace(tmp, out)
            done = True
    finally:
        for p in [] if done else made:  # innermost first; one that holds a file stays
            with contextlib.suppress(OSError):
                p.rmdir()
