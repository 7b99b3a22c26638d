"""Field access for readers: every problem becomes an ``InputError`` naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.traces.model import HashIds


def req_int(rec: dict[str, Any], key: str, *, nonneg: bool = True) -> int:
    if key not in rec:
        raise InputError("missing", field=key)
    val = rec[key]
    if isinstance(val, bool) or not isinstance(val, int | float) \
            or (isinstance(val, float) and not val.is_integer()):  # NaN, inf, 2.5
        raise InputError(f"expected an integer, got {val!r}", field=key)
    if nonneg and val < 0:
        raise InputError(f"negative length {val}", field=key)
    return int(val)


def req_num(rec: dict[str, Any], key: str, *, nonneg: bool = False) -> float:
    if key not in rec:
        raise InputError("missing", field=key)
    return _num(rec[key], key, nonneg)


def opt_num(rec: dict[str, Any], key: str, *, nonneg: bool = False) -> float | None:
    val = rec.get(key)
    return None if val is None else _num(val, key, nonneg)


def _num(val: Any, key: str, nonneg: bool) -> float:
    if isinstance(val, bool) or not isinstance(val, int | float):
        raise InputError(f"expected a number, got {val!r}", field=key)
    if val != val:  # NaN
        raise InputError("NaN", field=key)
    if nonneg and val < 0:
        raise InputError(f"negative value {val}", field=key)
    return float(val)


def req_hash_ids(rec: dict[str, Any], key: str = "hash_ids") -> HashIds:
    if key not in rec:
        raise InputError("missing", field=key)
    val = rec[key]
    if not isinstance(val, list):
        raise InputError(f"expected a list of integers, got {type(val).__name__}", field=key)
    try:
        arr = np.array(val, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise InputError("expected a list of integers", field=key) from None
    if arr.ndim != 1 or (len(val) and not all(isinstance(v, int) for v in val[:1])):
        raise InputError("expected a flat list of integers", field=key)
    return arr


def load_json(path: Path) -> Any:
    try:
        with path.open("rb") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON ({e.msg})", source=str(path),
                         where=f"line {e.lineno} column {e.colno}") from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", source=str(path)) from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-empty line; a bad line is an error naming it."""
    with path.open("rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"invalid JSON ({e.msg})", source=str(path),
                                 where=f"line {lineno}") from None
            except UnicodeDecodeError:
                raise InputError("not UTF-8 text", source=str(path),
                                 where=f"line {lineno}") from None
            if not isinstance(rec, dict):
                raise InputError("expected a JSON object", source=str(path),
                                 where=f"line {lineno}")
            yield lineno, rec
