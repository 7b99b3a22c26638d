"""Field access for readers: every problem becomes an ``InputError`` naming the field."""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from agentbench.errors import InputError
from agentbench.traces import MAX_BLOCK_SIZE, MAX_TOKENS
from agentbench.traces.model import HashIds

#: the longest JSONL line a reader given ``max_line`` takes (a gzip bomb's one endless
#: line stops here)
MAX_LINE = 64 << 20


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


def req_tokens(rec: dict[str, Any], key: str) -> int:
    """A token count: an integer in ``[0, MAX_TOKENS]``."""
    n = req_int(rec, key)
    if n > MAX_TOKENS:
        raise InputError(f"{n} tokens is over the {MAX_TOKENS:,} a request may count",
                         field=key)
    return n


def check_block_size(block_size: Any) -> int:
    """A block size given as a reader option: an integer from 1 to ``MAX_BLOCK_SIZE``."""
    if (isinstance(block_size, bool) or not isinstance(block_size, int)
            or not 0 < block_size <= MAX_BLOCK_SIZE):
        raise InputError(f"expected a whole number from 1 to {MAX_BLOCK_SIZE:,}, got "
                         f"{block_size!r}", field="block_size")
    return block_size


def check_seed(seed: Any) -> int:
    """A seed given as a reader option (``-O seed=N``, ``trace.options.seed``): an integer
    from 0 to 2**63-1, as a scenario's ``seed``. numpy's own refusal of ``1.5``, ``nan``
    or ``abc`` was a TypeError traceback; of ``-1``, a 'cannot read it: ValueError'."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError(f"expected an integer from 0 to 2**63-1, got {seed!r}",
                         field="seed")
    return seed


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
    try:
        num = float(val)
    except OverflowError:  # an integer past the float range
        num = math.inf
    if not -math.inf < num < math.inf:
        raise InputError(f"expected a finite number, got {val!r}", field=key)
    if nonneg and num < 0:
        raise InputError(f"negative value {val}", field=key)
    return num


def max_hash_ids(tokens: int, block_size: int) -> int:
    """The most hash ids ``tokens`` input tokens allow in blocks of ``block_size``."""
    return -(-tokens // block_size)


def req_hash_ids(rec: dict[str, Any], key: str = "hash_ids", *,
                 tokens: int = MAX_TOKENS, block_size: int = 1) -> HashIds:
    """The hash ids of a request of ``tokens`` input tokens, its length checked before
    anything is built from it."""
    if key not in rec:
        raise InputError("missing", field=key)
    val = rec[key]
    if not isinstance(val, list):
        raise InputError(f"expected a list of integers, got {type(val).__name__}", field=key)
    allowed = max_hash_ids(tokens, block_size)
    if len(val) > allowed:
        raise InputError(f"{len(val)} hash ids but {tokens} input tokens allow at most "
                         f"{allowed} blocks of {block_size}", field=key)
    # every element an int (numpy would take "2" as 2 and 2.7 as 2); bool is not a count
    bad = next((v for v in val if type(v) is not int), None)
    if bad is not None:
        what = "a list" if isinstance(bad, list) else repr(bad)[:40]
        raise InputError(f"expected a flat list of integers, found {what}", field=key)
    try:
        arr = np.array(val, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise InputError("expected a list of integers (each within 64 bits)",
                         field=key) from None
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
    except (ValueError, RecursionError) as e:  # an integer of 5,000 digits, deep nesting
        raise InputError(f"invalid JSON ({json_problem(e)})", source=str(path)) from None


def json_problem(e: Exception) -> str:
    """What is wrong with JSON that decoding rejected, in a few words."""
    if isinstance(e, json.JSONDecodeError):
        return e.msg
    if isinstance(e, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    if "digits" in str(e):  # int() refuses numbers of thousands of digits
        return "a number with too many digits"
    return str(e).splitlines()[0][:120] if str(e) else type(e).__name__


def open_lines(path: Path) -> IO[bytes]:
    """``path`` opened for reading, through gzip when it starts with gzip's magic."""
    with path.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else path.open("rb")  # type: ignore[return-value]


def iter_jsonl(path: Path, *, opener: Callable[[Path], IO[bytes]] | None = None,
               max_line: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-empty line; a bad line is an error naming it.
    ``opener`` (e.g. ``open_lines``, for gzip) opens the file; a line longer than
    ``max_line`` bytes is an error (an endless line stops there)."""
    with (opener or (lambda q: q.open("rb")))(path) as f:
        lineno = 0
        while True:
            try:
                line = f.readline(-1 if max_line is None else max_line + 1)
            except (OSError, EOFError, zlib.error) as e:  # a damaged or cut gzip stream
                raise InputError(f"cannot read it: {e}", source=str(path),
                                 where=f"line {lineno + 1}") from None
            if not line:
                return
            lineno += 1
            if max_line is not None and len(line) > max_line:
                raise InputError(f"a line over {max_line >> 20} MiB", source=str(path),
                                 where=f"line {lineno}")
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except UnicodeDecodeError:
                raise InputError("not UTF-8 text", source=str(path),
                                 where=f"line {lineno}") from None
            except (ValueError, RecursionError) as e:
                raise InputError(f"invalid JSON ({json_problem(e)})", source=str(path),
                                 where=f"line {lineno}") from None
            if not isinstance(rec, dict):
                raise InputError("expected a JSON object", source=str(path),
                                 where=f"line {lineno}")
            yield lineno, rec


def first_line(path: Path) -> bytes:
    """The first non-blank line of a file, whole however long (a JSONL record may well pass
    64 KiB); empty bytes for a blank file."""
    lines = first_lines(path, 1)
    return lines[0] if lines else b""


def first_lines(path: Path, n: int) -> list[bytes]:
    """The first ``n`` non-blank lines of a file (stripped), each whole."""
    out: list[bytes] = []
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                out.append(line.strip())
                if len(out) == n:
                    break
    return out
