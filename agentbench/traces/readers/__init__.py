"""Readers: every source format into the one trace model (docs/traces.md).

Each reader is a function ``read(path, **options) -> Trace`` in its own module, imported
only when used. ``detect_format`` looks at content, not at file names alone.

A folder is read file by file (``read_files``): every bad file (a trace file of another
kind than the reader's among them too) is named in one ``BadTraceFiles`` error, or, with
``skip_bad``, left out and listed in ``Trace.skipped``. The native reader reads one file.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from agentbench.errors import InputError
from agentbench.traces.model import Trace
from agentbench.traces.readers._fields import first_lines, json_problem

# format name -> module under agentbench.traces.readers exposing read(path, **options)
READERS: dict[str, str] = {
    "weka": "weka",
    "mooncake": "mooncake",
    "sharegpt": "sharegpt",
    "bailian": "bailian",
    "copilot": "copilot",
    "openai-log": "openai_log",
    "native": "native",
    "hf": "hf",
    "tracelab": "tracelab",
}
#: readers of a file or a folder of files, whose ``read`` takes ``skip_bad``
FOLDER_READERS = frozenset({"weka", "mooncake", "sharegpt", "bailian", "copilot",
                            "openai-log", "tracelab"})
#: readers whose ``read`` takes ``sessions`` (the roots a filter keeps) and reads only
#: theirs: folders of one file per root session, and native files (their trees' turns)
PER_ROOT_FILES = frozenset({"weka", "native"})
#: readers of gzipped files (the TraceLab release is one); the others read plain text
GZIP_READERS = frozenset({"tracelab"})
#: bad files a one-line error lists before "(+N more)"; ``lines()`` lists them all
_LISTED = 10

T = TypeVar("T")


class BadTraceFiles(InputError):
    """Bad files of a trace folder: ``errors`` holds one located error per file. The one
    line lists them; ``lines()`` gives one line per file (the CLI prints those). ``source``,
    ``where`` and ``field`` are those of the first bad file."""

    def __init__(self, folder: str, errors: list[InputError], n_files: int,
                 *, skip_bad: bool) -> None:
        self.folder = folder
        self.errors = errors
        self.n_files = n_files
        self.skip_bad = skip_bad
        first = errors[0]
        super().__init__(first.message, source=first.source, where=first.where,
                         field=first.field)

    def summary(self) -> str:
        k, n = len(self.errors), self.n_files
        what = (f"all {n} trace files are bad" if k == n
                else f"{k} of {n} trace files are bad")
        hint = ("nothing left to read" if self.skip_bad and k == n
                else "skip_bad (--skip-bad) reads the others" if k < n else "")
        return f"{self.folder}: {what}" + (f" ({hint})" if hint else "")

    def one_line(self) -> str:
        listed = "; ".join(e.one_line() for e in self.errors[:_LISTED])
        more = f" (+{len(self.errors) - _LISTED} more)" if len(self.errors) > _LISTED else ""
        return f"{self.summary()}: {listed}{more}"

    def lines(self) -> list[str]:
        return [self.summary(), *(e.one_line() for e in self.errors)]

    def located(self, *, source: str | None = None, where: str | None = None) -> InputError:
        return self  # already names every file


def read_trace(source: str | Path, format: str | None = None, *, skip_bad: bool = False,
               sessions: Collection[str] | None = None, **options: Any) -> Trace:
    """Read ``source`` (file, folder, Hugging Face dataset id, ``builtin:NAME`` or
    ``cache:NAME``; see ``traces.sources``) as ``format``. Whatever
    the bytes, a bad trace is an ``InputError`` naming it, never a traceback.

    In a folder, every bad file is named (``BadTraceFiles``); with ``skip_bad`` they are
    left out instead and listed, one line each, in the trace's ``skipped``. ``sessions``
    (the root sessions a filter will keep) lets a folder of one file per root read only
    theirs (``weka``: when every one is a file of that name holding it), and a native file
    (``builtin:`` traces) read only their trees' turns; the trace may still hold others."""
    if not isinstance(skip_bad, bool):
        raise InputError(f"expected true or false, got {skip_bad!r}", field="skip_bad")
    if isinstance(source, str) and not source.strip():  # Path("") is the working folder
        raise InputError("an empty trace source (give a file, folder, dataset id or "
                         "builtin:NAME)", field="source")
    if isinstance(source, str) and source.startswith(("builtin:", "cache:")):
        from agentbench.traces.sources import resolve

        source, format = resolve(source, format)
    check_trace_path(source)
    try:
        fmt = format or detect_format(source)
        if fmt not in READERS:
            raise InputError(
                f"unknown trace format {fmt!r} (known: {', '.join(READERS)})",
                source=str(source))
        if fmt == "native" and Path(source).is_dir():  # its error said "is a directory"
            raise _native_folder(Path(source))
        if fmt not in GZIP_READERS and _gzipped(Path(source)):
            # detection reads through gzip; the reader then said "line 1: not UTF-8 text"
            raise InputError(f"gzipped: the {fmt} reader reads plain text; gunzip it first "
                             "(only TraceLab rounds are read gzipped)", source=str(source))
        module = importlib.import_module(f"agentbench.traces.readers.{READERS[fmt]}")
        if fmt in FOLDER_READERS:
            options["skip_bad"] = skip_bad
        if fmt in PER_ROOT_FILES and sessions is not None:
            options["sessions"] = list(sessions)
        trace: Trace = module.read(source, **options)
    except InputError:
        raise
    except (UnicodeError, ValueError, OverflowError, RecursionError) as e:
        raise as_input_error(e, str(source)) from e
    return trace


def _gzipped(path: Path) -> bool:
    """Whether ``path`` is a file that starts with gzip's magic bytes."""
    try:
        with path.open("rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:  # a folder, a dataset id: its reader says what it is
        return False


def _native_folder(path: Path) -> InputError:
    """A folder given to the native reader, which reads one file: one line naming one."""
    files = [p for p in trace_candidates(path) if p.suffix == ".parquet"]
    if not files:
        return InputError("a folder: the native reader reads one .parquet file; give one",
                          source=str(path))
    return InputError(f"a folder of native .parquet traces ({len(files)} file"
                      f"{'s' * (len(files) != 1)}): the native reader reads one file; give "
                      f"one, e.g. {files[0]}", source=str(path))


def check_trace_path(source: str | Path) -> None:
    """A trace path must be a regular file or a folder: a device (``/dev/zero``), a FIFO
    or a socket could be endless or block forever, and a loop of links leads nowhere. A
    path that does not exist is left to the format detection (a dataset id, or the
    "no such file" error)."""
    import errno
    import stat

    try:
        mode = os.stat(source).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError("a loop of symbolic links", source=str(source)) from None
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError("not a regular file or folder (a device, FIFO or socket, which "
                         "could be endless)", source=str(source))


def as_input_error(e: BaseException, source: str) -> InputError:
    """A reader's failure as the one-line error naming ``source``."""
    if isinstance(e, InputError):
        return e
    if isinstance(e, UnicodeError):
        return InputError(f"not UTF-8 text ({e})", source=source)
    if isinstance(e, RecursionError):
        return InputError("nested too deeply", source=source)
    msg = str(e).splitlines()[0][:200] if str(e) else ""
    return InputError(f"cannot read it: {type(e).__name__}: {msg}", source=source)


def read_files(path: Path, suffixes: tuple[str, ...], read_one: Callable[[Path], T], *,
               skip_bad: bool, files: list[Path] | None = None) -> tuple[list[T], list[str]]:
    """``read_one`` of every trace file of ``path`` (a folder, or one file), or of ``files``
    of that folder, and the one-line reasons of the files skipped. A folder's bad files are
    all named in one ``BadTraceFiles``; with ``skip_bad`` they are skipped unless none is
    left."""
    if files is None:
        files = trace_files(path, suffixes)
    if not path.is_dir():
        return [read_one(files[0])], []
    out: list[T] = []
    bad: list[InputError] = []
    for f in files:
        try:
            out.append(read_one(f))
        except (InputError, UnicodeError, ValueError, OverflowError, RecursionError) as e:
            err = as_input_error(e, str(f))
            bad.append(err if isinstance(err, BadTraceFiles) else err.located(source=str(f)))
    # a trace file this format's files are not (a .jsonl among Weka .json files) was left
    # unread without a word: it is a bad file of the folder
    other = [f for f in trace_candidates(path) if f.suffix not in suffixes]
    bad += [InputError(f"a {f.suffix} file among the folder's {'/'.join(suffixes)} trace "
                       "files: not read (a trace of another format? read it on its own)",
                       source=str(f)) for f in other]
    if bad and (not skip_bad or not out):
        raise BadTraceFiles(str(path), bad, len(files) + len(other), skip_bad=skip_bad)
    return out, [e.one_line() for e in bad]


def detect_format(source: str | Path) -> str:
    """Guess the format of ``source`` from its content."""
    path = Path(source)
    if not path.exists():
        if looks_like_hub_id(str(source)):
            return "hf"
        raise InputError("no such file or folder", source=str(source))
    if path.is_dir():
        return _detect_dir(path)
    if path.suffix.lower() in (".yaml", ".yml"):  # no trace is YAML; a scenario is
        raise InputError("a YAML file, not a trace (traces are JSON, JSONL, parquet or "
                         "gzip; a scenario names its trace under trace.source)",
                         source=str(path))
    with path.open("rb") as f:
        head = f.read(4)
    if head == b"PAR1":
        return "native"
    first = _first_gzip_record(path) if head[:2] == b"\x1f\x8b" else _first_record(path)
    return detect_record_format(first, source=str(path))


def detect_record_format(rec: Any, *, source: str = "") -> str:
    """The format a single decoded record (or whole JSON document) belongs to."""
    if isinstance(rec, list):
        rec = rec[0] if rec else {}
    if not isinstance(rec, dict):
        raise InputError("cannot detect the trace format: first record is not an object",
                         source=source)
    keys = set(rec)
    if {"session_id", "round_index", "input_tokens_total", "prefix_tokens"} <= keys:
        return "tracelab"
    if "requests" in keys and ("block_size" in keys or "hash_id_scope" in keys):
        return "weka"
    if "chat_id" in keys and "parent_chat_id" in keys:
        return "bailian"
    if "conversations" in keys:
        return "sharegpt"
    if "turns" in keys and "session_id" in keys:
        return "copilot"
    if isinstance(rec.get("record"), dict) or (  # a Copilot file wrapping its records
            isinstance(rec.get("records"), list) and rec["records"]):
        inner = rec["record"] if isinstance(rec.get("record"), dict) else rec["records"][0]
        if isinstance(inner, dict) and "turns" in inner and "session_id" in inner:
            return "copilot"
    if "messages" in keys and "timestamp" not in keys and isinstance(rec.get("messages"),
                                                                     list):
        # one conversation per record without a time (a SWE-style or chat dataset):
        # sessions of text, read as ShareGPT reads them; a request log has timestamps
        return "sharegpt"
    if "messages" in keys or ("body" in keys and isinstance(rec.get("body"), dict)) or (
        "request" in keys and isinstance(rec.get("request"), dict)
    ):
        return "openai-log"
    if "input_length" in keys and "output_length" in keys:
        return "mooncake"
    raise InputError(
        f"cannot detect the trace format from keys {sorted(keys)[:8]}; name it "
        "(trace.format in a scenario, --format for agentbench traces)",
        source=source,
    )


def _detect_dir(path: Path) -> str:
    """The format of the first trace file whose format can be told; when none can, every
    candidate's reason."""
    if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
        return "hf"
    files = trace_candidates(path)
    if not files:
        raise InputError("folder holds no .json, .jsonl, .jsonl.gz or .parquet trace files",
                         source=str(path))
    bad: list[InputError] = []
    for p in files:
        try:
            return detect_format(p)
        except (InputError, UnicodeError, ValueError, RecursionError) as e:
            bad.append(as_input_error(e, str(p)).located(source=str(p)))
    raise BadTraceFiles(str(path), bad, len(files), skip_bad=False)


def _first_record(path: Path) -> Any:
    """First JSON value of a .json document or of a JSONL file (first non-empty line, read
    whole however long)."""
    lines = first_lines(path, 2)
    if not lines:
        raise InputError("empty file", source=str(path))
    try:  # JSONL: the first line is a complete value
        return json.loads(lines[0])
    except (ValueError, RecursionError) as e:
        first_problem = json_problem(e)
    try:
        with path.open("rb") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        if e.lineno > 1 and len(lines) > 1 and _is_json(lines[1]):
            # JSONL whose first line is broken: the document error (at the line after it)
            # would point past the culprit
            raise InputError(f"not valid JSON ({first_problem})", source=str(path),
                             where="line 1") from None
        raise InputError(f"not valid JSON ({e.msg})", source=str(path),
                         where=f"line {e.lineno} column {e.colno}") from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"not valid JSON ({json_problem(e)})", source=str(path)) from None


def _first_gzip_record(path: Path) -> Any:
    """First JSON line of a gzipped JSONL file (the TraceLab release is one)."""
    from agentbench.traces.readers._fields import MAX_LINE, iter_jsonl, open_lines

    for _, rec in iter_jsonl(path, opener=open_lines, max_line=MAX_LINE):
        return rec
    raise InputError("empty file", source=str(path))


def _is_json(text: bytes) -> bool:
    try:
        json.loads(text)
        return True
    except (ValueError, RecursionError):
        return False


_FILE_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".yaml", ".yml", ".arrow", ".gz")


def looks_like_hub_id(s: str, base: Path | None = None) -> bool:
    """``org/name`` (not a path that merely does not exist, like ``traces/x.jsonl``, nor
    one inside a local folder ``org``, relative to ``base`` or the working folder: a
    mistyped file name there went to the hub, 25 s of retries and a ConnectionError)."""
    parts = s.split("/")
    return (len(parts) == 2 and all(p and not p.startswith((".", "~")) for p in parts)
            and not s.endswith(_FILE_SUFFIXES)
            and not ((base or Path()) / parts[0]).is_dir())


#: what a folder's trace files end with, whatever their format (``trace_candidates``)
TRACE_SUFFIXES = (".json", ".jsonl", ".parquet", ".gz")


def trace_candidates(folder: Path) -> list[Path]:
    """The files of ``folder`` (sorted) that may be traces: not hidden, ending in one of
    ``TRACE_SUFFIXES``. Its format is told from the first one that tells it."""
    return [p for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")
            and p.suffix in TRACE_SUFFIXES]


def trace_files(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files of a folder (sorted) ending in one of ``suffixes``, hidden ones left out
    as ``trace_candidates`` leaves them (a folder copied from a Mac holds a binary
    ``._name.jsonl`` beside each ``name.jsonl``), or the file itself."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in suffixes
                       and not p.name.startswith("."))
        if not files:
            raise InputError(f"folder holds no {'/'.join(suffixes)} files", source=str(path))
        return files
    if not path.exists():
        raise InputError("no such file or folder", source=str(path))
    return [path]
