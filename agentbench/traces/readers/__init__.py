"""Readers: every source format into the one trace model (CONTRACTS §2).

Each reader is a function ``read(path, **options) -> Trace`` in its own module, imported
only when used. ``detect_format`` looks at content, not at file names alone.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.traces.model import Trace

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
}


def read_trace(source: str | Path, format: str | None = None, **options: Any) -> Trace:
    """Read ``source`` (file, folder, or Hugging Face dataset id) as ``format``. Whatever
    the bytes, a bad trace is an ``InputError`` naming it, never a traceback."""
    try:
        fmt = format or detect_format(source)
        if fmt not in READERS:
            raise InputError(
                f"unknown trace format {fmt!r} (known: {', '.join(READERS)})",
                source=str(source))
        module = importlib.import_module(f"agentbench.traces.readers.{READERS[fmt]}")
        trace: Trace = module.read(source, **options)
    except InputError:
        raise
    except UnicodeError as e:
        raise InputError(f"not UTF-8 text ({e})", source=str(source)) from e
    except (ValueError, OverflowError, RecursionError) as e:
        raise InputError(f"cannot read it: {type(e).__name__}: {str(e)[:200]}",
                         source=str(source)) from e
    return trace


def detect_format(source: str | Path) -> str:
    """Guess the format of ``source`` from its content."""
    path = Path(source)
    if not path.exists():
        if looks_like_hub_id(str(source)):
            return "hf"
        raise InputError("no such file or folder", source=str(source))
    if path.is_dir():
        return _detect_dir(path)
    with path.open("rb") as f:
        head = f.read(4)
    if head == b"PAR1":
        return "native"
    first = _first_record(path)
    return detect_record_format(first, source=str(path))


def detect_record_format(rec: Any, *, source: str = "") -> str:
    """The format a single decoded record (or whole JSON document) belongs to."""
    if isinstance(rec, list):
        rec = rec[0] if rec else {}
    if not isinstance(rec, dict):
        raise InputError("cannot detect the trace format: first record is not an object",
                         source=source)
    keys = set(rec)
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
    if "messages" in keys or ("body" in keys and isinstance(rec.get("body"), dict)) or (
        "request" in keys and isinstance(rec.get("request"), dict)
    ):
        return "openai-log"
    if "input_length" in keys and "output_length" in keys:
        return "mooncake"
    raise InputError(
        f"cannot detect the trace format from keys {sorted(keys)[:8]}; pass --format",
        source=source,
    )


def _detect_dir(path: Path) -> str:
    if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
        return "hf"
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    for p in files:
        if p.suffix in (".json", ".jsonl", ".parquet"):
            return detect_format(p)
    raise InputError("folder holds no .json, .jsonl or .parquet trace files", source=str(path))


def _first_record(path: Path) -> Any:
    """First JSON value of a .json document or of a JSONL file (first non-empty line)."""
    with path.open("rb") as f:
        start = f.read(1 << 16)
    stripped = start.lstrip()
    if not stripped:
        raise InputError("empty file", source=str(path))
    # JSONL: the first line is a complete value
    line = stripped.split(b"\n", 1)[0]
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        pass
    try:
        with path.open("rb") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"not valid JSON ({e.msg})", source=str(path),
                         where=f"line {e.lineno} column {e.colno}") from None


_FILE_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".yaml", ".yml", ".arrow", ".gz")


def looks_like_hub_id(s: str) -> bool:
    """``org/name`` (not a path that merely does not exist, like ``traces/x.jsonl``)."""
    parts = s.split("/")
    return (len(parts) == 2 and all(p and not p.startswith((".", "~")) for p in parts)
            and not s.endswith(_FILE_SUFFIXES))


def trace_files(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files of a folder (sorted) or the file itself."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in suffixes)
        if not files:
            raise InputError(f"folder holds no {'/'.join(suffixes)} files", source=str(path))
        return files
    if not path.exists():
        raise InputError("no such file or folder", source=str(path))
    return [path]
