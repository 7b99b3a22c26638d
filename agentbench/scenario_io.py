"""Loading scenario files: YAML in, a validated ``Scenario`` out, or every problem with
its key path (and line, when the YAML tells it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from agentbench.errors import InputError

#: (key path, line or None, message)
Problem = tuple[str, int | None, str]


class ScenarioError(InputError):
    """A scenario with one or more problems; ``problems`` holds (key path, line, message)."""

    def __init__(self, source: str, problems: list[tuple[str, int | None, str]]) -> None:
        self.problems = problems
        first = problems[0]
        where = f"line {first[1]}" if first[1] else None
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{first[0]}: {first[2]}{more}", source=source, where=where)

    def lines(self) -> list[str]:
        out = []
        for path, line, msg in self.problems:
            loc = f"{self.source}:{line}" if line else f"{self.source}"
            out.append(f"{loc}: {path}: {msg}")
        return out


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Line (1-based) of every mapping key and sequence item, by key path."""
    out: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return out

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                p = (*path, str(k.value))
                out[p] = k.start_mark.line + 1
                walk(v, p)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                p = (*path, str(i))
                out[p] = v.start_mark.line + 1
                walk(v, p)

    if root is not None:
        walk(root, ())
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (YAML keeps the last one
    silently, so a duplicated section would quietly replace the first)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode,
                    deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
        except TypeError:
            continue
        if dup:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice in one mapping", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _unique_mapping)


def parse_scenario(text: str, source: str = "<scenario>") -> Any:
    from pydantic import ValidationError

    from agentbench.scenario import Scenario

    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ScenarioError(source, [("(yaml)", line, str(getattr(e, "problem", e)))]) from None
    if not isinstance(data, dict):
        raise ScenarioError(source, [("(root)", None, "a scenario is a YAML mapping")])
    lines = _key_lines(text)
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(source, _problems(e, lines)) from None
    problems: list[Problem] = []
    names = [v.name for v in sc.variants]
    for i, v in enumerate(sc.variants):
        if v.name in names[:i]:
            problems.append((f"variants.{i}.name", lines.get(("variants", str(i), "name")),
                             f"variant name {v.name!r} used twice"))
        try:
            _variant(sc, v)
        except _SetError as e:
            problems.append((f"variants.{i}.set.{e.key}",
                             lines.get(("variants", str(i), "set", e.key)), e.msg))
        except ValidationError as e:
            for path, _, msg in _problems(e, {}):
                problems.append((f"variants.{i}.set -> {path}",
                                 lines.get(("variants", str(i), "set")), msg))
    if problems:
        raise ScenarioError(source, problems)
    return sc


def _problems(e: Any, lines: dict[tuple[str, ...], int]) -> list[Problem]:
    problems: list[Problem] = []
    for err in e.errors():
        loc = tuple(str(p) for p in err["loc"])
        # drop discriminator tags pydantic inserts (e.g. 'openai', 'lanes') from the path
        path = [p for p in loc if not _is_tag(p)]
        line = None
        for n in range(len(path), 0, -1):
            line = lines.get(tuple(path[:n]))
            if line:
                break
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "string_pattern_mismatch" and path and path[-1] == "url":
            msg = "must start with http:// or https://"
        if err["type"] == "extra_forbidden":
            msg = "unknown key (typo?)"
        problems.append((".".join(path) or "(root)", line, msg))
    return problems


class _SetError(Exception):
    def __init__(self, key: str, msg: str) -> None:
        self.key, self.msg = key, msg
        super().__init__(msg)


def _variant(sc: Any, v: Any) -> Any:
    """The scenario of one variant: the base with the variant's dotted keys set."""
    from agentbench.scenario import Scenario

    data = sc.model_dump(mode="python", exclude={"variants"})
    for key, value in v.set.items():
        node: Any = data
        parts = key.split(".")
        for j, part in enumerate(parts):
            last = j == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise _SetError(key, f"{'.'.join(parts[:j]) or 'root'} has no item {part}")
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
                    if node is None:
                        node = {}
            else:
                raise _SetError(key, f"{'.'.join(parts[:j])} is not a mapping or list")
    data["name"] = f"{sc.name}-{v.name}"
    if v.description:
        data["description"] = v.description
    if sc.output.run_id:
        data["output"]["run_id"] = f"{sc.output.run_id}-{v.name}"
    out = Scenario.model_validate(data)
    # defaults that depend on the clock (``idle_cap_for``, ``interval_for``) stay defaults
    # unless the base or the variant set them
    for sect, name in (("timing", "idle_cap_s"), ("server_metrics", "interval_s")):
        by_variant = f"{sect}.{name}" in v.set or (
            isinstance(v.set.get(sect), dict) and name in v.set[sect])
        if name not in getattr(sc, sect).model_fields_set and not by_variant:
            getattr(out, sect).model_fields_set.discard(name)
    return out


def expand_variants(sc: Any) -> list[Any]:
    """One scenario per variant (the scenario itself when it has none)."""
    if not sc.variants:
        return [sc]
    return [_variant(sc, v) for v in sc.variants]


def _is_tag(part: str) -> bool:
    return part in {"openai", "simulated", "file", "synth", "lanes", "rate"} or (
        part.startswith("function-") or part in {"int", "list[int]", "float", "list[float]"})


def check_scenario(sc: Any, base_dir: Path, text: str = "") -> tuple[list[Problem], list[str]]:
    """Problems beyond the schema (files that do not exist, duplicate names) and warnings
    (an API key variable that is not set). Relative trace paths are resolved against
    ``base_dir`` (the scenario's folder) in place."""
    from agentbench.traces.readers import looks_like_hub_id

    lines = _key_lines(text) if text else {}
    problems: list[Problem] = []
    warnings: list[str] = []
    trace = sc.trace
    if getattr(trace, "kind", None) == "file":
        src = Path(trace.source).expanduser()
        cand = src if src.is_absolute() else base_dir / src
        if cand.exists():
            trace.source = str(cand.resolve())
        elif not looks_like_hub_id(trace.source):
            problems.append(("trace.source", lines.get(("trace", "source")),
                             f"no such file or folder: {trace.source} (relative paths are "
                             f"relative to the scenario's folder {base_dir})"))
    names = [e.name or getattr(e, "url", None) or "sim" for e in sc.endpoints]
    for i, n in enumerate(names):
        if n in names[:i]:
            problems.append((f"endpoints.{i}.name", lines.get(("endpoints", str(i))),
                             f"endpoint label {n!r} used twice; give each a distinct name"))
    for i, e in enumerate(sc.endpoints):
        env = getattr(e, "api_key_env", None)
        if env and not os.environ.get(env):
            warnings.append(f"endpoints.{i}.api_key_env: environment variable {env} is not set")
        if e.kind == "simulated" and sc.clock_mode == "virtual" and e.speedup != 1:
            warnings.append(f"endpoints.{i}.speedup: no effect in virtual time (the "
                            "simulator runs on the replay's simulated clock); it applies to "
                            "clock: wall only")
    if sc.clock_mode == "virtual" and sc.prompt.tokenizer:
        warnings.append("prompt.tokenizer: no effect in virtual time (prompts reach the "
                        "in-process simulator as block hashes, not text)")
    return problems, warnings


def load_scenario(path: str | Path, *, check: bool = True) -> Any:
    """Read, validate and check a scenario file; raise ``ScenarioError`` with every problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read scenario ({e.strerror})", source=str(p)) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not a text (UTF-8) file: byte {e.start} cannot be decoded",
                         source=str(p)) from None
    if "\x00" in text:
        raise InputError("not a text file (it holds NUL bytes)", source=str(p))
    sc = parse_scenario(text, source=str(p))
    if check:
        problems, _ = check_scenario(sc, p.resolve().parent, text)
        if problems:
            raise ScenarioError(str(p), problems)
    return sc
