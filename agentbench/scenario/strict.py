"""The base of every scenario model: strict validation (no unknown keys, no coercion, no
NaN, integers within 64 bits) and the check that a free-form mapping is plain JSON."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ValidationInfo,
    field_validator,
)


class Strict(BaseModel):
    """No unknown keys, no coercion (``true`` is not a count, ``"5"`` is not a number), no
    NaN or infinity."""

    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=True,
                              strict=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _int64(cls, v: Any, info: ValidationInfo) -> Any:
        """Every integer fits in 64 bits: a longer one is a typo, and numpy, parquet and
        the seed generators overflow on it. Every duration (a field named ``*_s``) is at
        most ``MAX_SECONDS``: run times are integer nanoseconds, and 1e300 s is a typo."""
        seconds = (info.field_name or "").endswith("_s")
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, int) and not isinstance(x, bool) and not -INT64 <= x <= INT64:
                raise ValueError(f"an integer of {len(str(abs(x)))} digits is out of range "
                                 f"(at most {INT64:,})")
            if seconds and isinstance(x, int | float) and not isinstance(x, bool) \
                    and x > MAX_SECONDS:
                if (info.field_name or "").endswith("per_s"):  # a rate: the same bound
                    raise ValueError(f"{x:g} per second is out of range (at most "
                                     f"{MAX_SECONDS:g})")
                raise ValueError(f"{x:g} s is out of range (at most {MAX_SECONDS:g} s, "
                                 "about 31 years)")
        return v


#: the largest integer a scenario may hold (2**63 - 1)
INT64 = 2**63 - 1
#: the longest duration a scenario may give: nanoseconds of it still fit in 64 bits
MAX_SECONDS = 1e9


def one_printable_line(v: str) -> str:
    """``v`` unchanged, or a ``ValueError``: a name or label that is printed to a terminal
    and into reports holds no control character (a line break, a carriage return, an
    escape sequence that would recolour, retitle or clear the user's terminal)."""
    if not v.isprintable():  # also U+2028 (a line break to splitlines), U+202E (reversal)
        raise ValueError("must be one line of printable text (no control characters: line "
                         "breaks, tabs, escape sequences)")
    return v


#: a name or label printed to a terminal and into reports (``one_printable_line``)
PrintableLine = Annotated[str, AfterValidator(one_printable_line)]


def json_only(value: dict[str, Any]) -> dict[str, Any]:
    """Check that ``value`` is plain JSON (string keys, finite numbers): it is sent or stored
    as JSON, and YAML can also make dates, sets, binary and NaN, which JSON cannot carry."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, x = stack.pop()
        if isinstance(x, dict):
            for k, item in x.items():
                if not isinstance(k, str):
                    raise ValueError(f"key {k!r}{where and f' in {where}'} is not a string")
                stack.append((f"{where}.{k}" if where else k, item))
        elif isinstance(x, list):
            stack.extend((f"{where}.{i}", item) for i, item in enumerate(x))
        elif isinstance(x, float) and not math.isfinite(x):
            raise ValueError(f"{where}: {x} is not a finite number")
        elif not (x is None or isinstance(x, str | int | float)):
            raise ValueError(f"{where}: {type(x).__name__} is not a JSON value (quote it to "
                             "give a string)")
    return value
