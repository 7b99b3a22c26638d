"""A scenario's validation errors as problem lines: pydantic's errors at the key paths the
file spells, in the user's words (``agentbench.scenario.loading`` raises them)."""

from __future__ import annotations

import math
from typing import Any, get_args

from agentbench.scenario.yamlfile import Problem, one_line


def value_kind(value: Any) -> str:
    """What a YAML value is, in YAML's words."""
    import datetime

    kinds: list[tuple[type, str]] = [
        (bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
        (dict, "a mapping"), (list, "a list"), (datetime.date, "a date"),
        (bytes, "binary data"), (set, "a set")]
    if value is None:
        return "null"
    return next((name for t, name in kinds if isinstance(value, t)),
                type(value).__name__)


#: what a value of the wrong type should have been, by pydantic error type
_WANTED = {"int_type": "an integer", "float_type": "a number", "string_type": "a string",
           "bool_type": "true or false"}


def _numeric(value: Any) -> bool:
    """A string that Python reads as a finite number (YAML 1.1 reads '1e3' as a string)."""
    if not isinstance(value, str):
        return False
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


def _union_kinds() -> dict[str, str]:
    """The values ``kind`` may take, by section (for 'missing kind' errors)."""
    from agentbench.scenario.model import Endpoint, Load, TraceSpec

    out = {}
    for section, union in (("endpoints", Endpoint), ("trace", TraceSpec), ("load", Load)):
        models = get_args(get_args(union)[0])
        out[section] = ", ".join(get_args(m.model_fields["kind"].annotation)[0]
                                 for m in models)
    return out


def _user_path(data: Any, loc: tuple[Any, ...], missing: bool) -> list[str]:
    """An error's location as the file spells it. Pydantic puts the names of union members
    into ``loc`` (a tag such as 'openai', or 'int', "literal['connect']"); only the parts
    that are keys or indexes of the data are kept (and a missing key at the end)."""
    out: list[str] = []
    node = data
    for i, part in enumerate(loc):
        if (isinstance(node, dict) and part in node) or (
                isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)):
            node = node[part]
        elif not (missing and i == len(loc) - 1):
            continue
        out.append(str(part))
    return out


def validation_problems(e: Any, lines: dict[tuple[str, ...], int], data: Any
                        ) -> list[Problem]:
    """A pydantic ``ValidationError`` ``e`` on ``data`` as problem lines: each at its key
    path as the file spells it (and its line in ``lines``, when known), in the user's
    words; a value that matches no member of a union is one line with each reason."""
    problems: list[Problem] = []
    kinds: dict[str, str] | None = None
    last_union = False
    for err in e.errors():
        path = _user_path(data, tuple(err["loc"]), err["type"] == "missing")
        union = len(path) < len(err["loc"])
        line = None
        for n in range(len(path), 0, -1):
            line = lines.get(tuple(path[:n]))
            if line:
                break
        msg = err["msg"].removeprefix("Value error, ")
        kind = err["type"]
        ctx = err.get("ctx") or {}
        if kind == "string_pattern_mismatch" and path and path[-1] == "url":
            msg = "must start with http:// or https://"
        elif kind == "extra_forbidden":
            msg = "unknown key (typo?)"
        elif kind == "union_tag_not_found":
            kinds = kinds or _union_kinds()
            section = next((p for p in reversed(path) if not p.isdigit()), "")
            allowed = kinds.get(section)
            msg = "missing key 'kind'" + (f" (one of: {allowed})" if allowed else "")
        elif kind == "union_tag_invalid":
            msg = (f"kind {one_line(repr(ctx.get('tag')), 60)} is not one of: "
                   f"{str(ctx.get('expected_tags', '')).replace(chr(39), '')}")
        elif kind in _WANTED:
            msg = f"must be {_WANTED[kind]}, not {value_kind(err.get('input'))}"
            if kind == "int_type" and _numeric(err.get("input")):
                msg = (f"must be {_WANTED[kind]}, not the string {err['input']!r} (write it "
                       "as a whole number without quotes, e.g. 1000; YAML reads 1e3 as a "
                       "string)")
            elif kind == "float_type" and _numeric(err.get("input")):
                msg = (f"must be {_WANTED[kind]}, not the string {err['input']!r} (write it "
                       "without quotes; YAML reads 1e3 as a string, 1.0e+3 as a number)")
        elif kind == "finite_number":
            msg = f"must be a finite number, not {err.get('input')}"
        elif kind == "string_pattern_mismatch" and path and path[-1] == "run_id":
            msg = ("must be a plain folder name of at most 200 characters: letters, digits "
                   "and _ . = + - (no '/', not starting with '.')")
        elif kind == "string_pattern_mismatch" and len(path) >= 2 and path[-1] == "name" \
                and path[0] == "variants":
            msg = (f"must be a plain name (letters, digits and _ . -: it becomes part of the "
                   f"run's folder), not {err.get('input')!r}")
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            msg = f"must be a mapping (key: value), not {value_kind(err.get('input'))}"
        elif kind == "list_type":
            msg = f"must be a list, not {value_kind(err.get('input'))}"
        elif (err["loc"] and err["loc"][-1] == "[key]") or msg == "Keys should be strings":
            msg = f"a key must be a string, not {value_kind(err.get('input'))}"
        where = ".".join(path) or "(root)"
        if union and last_union and problems[-1][0] == where:
            # a value that matches no member of a union: one line with each member's reason
            if msg not in problems[-1][2]:
                problems[-1] = (where, problems[-1][1], f"{problems[-1][2]}; or {msg}")
        else:
            problems.append((where, line, msg))
        last_union = union
    return problems
