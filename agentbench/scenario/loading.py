"""Loading scenario files: YAML in, a validated ``Scenario`` out, or every problem with
its key path (and line, when the YAML tells it).

Whatever the file holds, the answer is a ``ScenarioError`` (or, for a file that cannot be
read as text, an ``InputError``) whose every problem is one line: the YAML reader is
bounded (size, nesting, alias expansion) so that no file makes it recurse, hang or fill
memory, and messages are cut to one printable line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.scenario.problems import validation_problems, value_kind
from agentbench.scenario.secrets import unset_env
from agentbench.scenario.yamlfile import (  # noqa: F401 - re-exported
    MAX_DEPTH,
    MAX_NODES,
    MAX_SCENARIO_CHARS,
    MAX_SHOWN,
    Problem,
    ScenarioError,
    key_lines,
    one_line,
    read_yaml,
    text_lines,
    yaml_problem,
)
from agentbench.traces.smallfile import read_head


def parse_scenario(text: str, source: str = "<scenario>",
                   sets: list[tuple[str, Any]] | None = None,
                   labels: dict[str, str] | None = None) -> Any:
    """A validated ``Scenario`` from YAML text (every variant checked too), or a
    ``ScenarioError`` naming ``source`` with every problem. ``sets`` (from
    :func:`parse_set`) override dotted keys of the file before it is validated; ``labels``
    (see :func:`validate_data`) name where a set came from."""
    data, root = read_yaml(text, source)
    if not isinstance(data, dict):
        what = "the file is empty" if data is None else f"not {value_kind(data)}"
        raise ScenarioError(source, [("(root)", None, "a scenario is a YAML mapping (key: "
                                      f"value lines); {what}")])
    return validate_data(data, source, key_lines(root), sets, labels)


def validate_data(data: dict[str, Any], source: str,
                  lines: dict[tuple[str, ...], int] | None = None,
                  sets: list[tuple[str, Any]] | None = None,
                  labels: dict[str, str] | None = None) -> Any:
    """A validated ``Scenario`` from plain data, checked as a file is. ``sets`` are
    (dotted key, value) overrides applied first; ``labels`` name where a key came from
    (``{"endpoints.0.url": "--url"}``): a problem under a set or labelled key is shown
    with it, so it names the flag the user typed."""
    from pydantic import ValidationError

    from agentbench.scenario.model import Scenario

    lines = lines or {}
    labels = dict(labels or {})
    problems: list[Problem] = []
    for key, value in sets or []:
        try:
            _set_path(data, key, value)
        except _SetError as e:
            problems.append((labels.get(key, f"--set {key}"), None, e.msg))
        labels.setdefault(key, f"--set {key}")
    if problems:
        raise ScenarioError(source, problems)
    from agentbench.scenario import rules

    rules.fill_defaults(data)
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(source, label_problems(validation_problems(e, lines, data),
                                                   labels)) from None
    if not sc.unsafe_override:
        problems.extend((key, lines.get(tuple(key.split("."))), msg)
                        for key, msg in rules.conflicts(sc))
    names = [v.name for v in sc.variants]
    for i, v in enumerate(sc.variants):
        if v.name in names[:i]:
            problems.append((f"variants.{i}.name", lines.get(("variants", str(i), "name")),
                             f"variant name {v.name!r} used twice"))
        try:
            out = _variant(sc, v)
            if not out.unsafe_override:
                problems.extend((f"variants.{i}.set -> {key}",
                                 lines.get(("variants", str(i), "set")), msg)
                                for key, msg in rules.conflicts(out))
        except _SetError as e:
            problems.append((f"variants.{i}.set.{e.key}",
                             lines.get(("variants", str(i), "set", e.key)), e.msg))
        except _VariantInvalid as e:
            for path, _, msg in validation_problems(e.error, {}, e.data):
                problems.append((f"variants.{i}.set -> {path}",
                                 lines.get(("variants", str(i), "set")), msg))
    if problems:
        raise ScenarioError(source, label_problems(problems, labels))
    return sc


def label_problems(problems: list[Problem], labels: dict[str, str]) -> list[Problem]:
    """Problems at, under or just above a labelled key, shown with the label
    (``--set load.kind -> load: ...``); the line is dropped, as the value did not come from
    that line of the file."""
    if not labels:
        return problems
    out: list[Problem] = []
    for path, line, msg in problems:
        above = [k for k in labels if path.startswith(k + ".")]
        below = [k for k in labels if k.startswith(path + ".")]
        key = (path if path in labels else max(above, key=len) if above
               else below[0] if len(below) == 1 else None)
        if key is None:
            out.append((path, line, msg))
        else:
            out.append((labels[key] if path == key else f"{labels[key]} -> {path}", None, msg))
    return out


def parse_set(item: str) -> tuple[str, Any]:
    """``KEY.PATH=VALUE`` from the command line: the dotted key and the value read as YAML
    (``4`` a number, ``[1, 2]`` a list, ``null``, ``'4'`` a string), within the file's
    bounds."""
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError(f"expected KEY.PATH=VALUE, got {one_line(repr(item), 80)}",
                         source="--set")
    if any(not part for part in key.split(".")):
        raise InputError("a key path is names joined by dots (e.g. limits.duration_s)",
                         source=f"--set {one_line(key, 80)}")
    try:
        parsed, _ = read_yaml(value, f"--set {key}")
    except ScenarioError as e:
        raise InputError(f"the value is not YAML: {e.problems[0][2]}",
                         source=f"--set {one_line(key, 80)}") from None
    return key, parsed


class _SetError(Exception):
    def __init__(self, key: str, msg: str) -> None:
        self.key, self.msg = key, msg
        super().__init__(msg)


class _VariantInvalid(Exception):
    """A variant's scenario that does not validate, with the data it was validated from."""

    def __init__(self, error: Any, data: Any) -> None:
        self.error, self.data = error, data
        super().__init__(str(error))


def _set_path(data: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` (mapping keys and list indexes) of ``data`` to ``value`` in
    place; an optional section left out is started."""
    node: Any = data
    parts = key.split(".")
    for j, part in enumerate(parts):
        last = j == len(parts) - 1
        if isinstance(node, list):
            if not (part.isascii() and part.isdigit()) or int(part) >= len(node):
                raise _SetError(key, f"{'.'.join(parts[:j]) or 'root'} has no item {part}")
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            elif j == 2 and parts[0] == "variants" and part == "set":
                # a variant's set has dotted keys: the rest of the path is one of them
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node[part][".".join(parts[3:])] = value
                return
            else:
                if node.get(part) is None:  # an optional section left out: start it
                    node[part] = {}
                node = node[part]
        else:
            raise _SetError(key, f"{'.'.join(parts[:j])} is not a mapping or list")


def _preset_file(ref: str | None, base_dir: Path) -> tuple[str | None, str | None]:
    """A preset reference with a preset file (``sim/preset_files``' format) made absolute
    relative to the scenario's folder (a shipped preset's name, or None, as it is), and
    the problem when there is no such file."""
    from agentbench.scenario.endpoints import is_preset_path

    if ref is None or not is_preset_path(ref):
        return ref, None
    try:
        path = Path(ref).expanduser()
        cand = path if path.is_absolute() else base_dir / path
        found = cand.is_file()
    except (OSError, ValueError, RuntimeError):  # ~nouser, a NUL byte, too long
        found = False
    if not found:
        return ref, (f"no such preset file: {ref} (relative paths are relative to the "
                     f"scenario's folder {base_dir})")
    return str(cand.resolve()), None


def _variant(sc: Any, v: Any) -> Any:
    """The scenario of one variant: the base with the variant's dotted keys set."""
    from pydantic import ValidationError

    from agentbench.scenario.model import Scenario

    data = sc.model_dump(mode="python", exclude={"variants"})
    for key, value in v.set.items():
        if key.split(".")[0] in ("name", "variants"):
            raise _SetError(key, "a variant cannot set this (its name is the scenario's name "
                            "and its own; variants do not nest)")
        _set_path(data, key, value)
    for i, ep in enumerate(data.get("endpoints") or []):
        # with pools, instances is their sum: the base's count is dropped (it was dumped
        # as set), a count the variant gives itself is checked against the pools
        if isinstance(ep, dict) and ep.get("disaggregation") \
                and f"endpoints.{i}.instances" not in v.set:
            ep.pop("instances", None)
    data["name"] = f"{sc.name}-{v.name}"
    if v.description:
        data["description"] = v.description
    if sc.output.run_id and isinstance(data.get("output"), dict):
        data["output"]["run_id"] = f"{sc.output.run_id}-{v.name}"
    try:
        out = Scenario.model_validate(data)
    except ValidationError as e:
        raise _VariantInvalid(e, data) from None
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


class _Lines:
    """The line of each key of a scenario's text (``text_lines``), parsed only when a problem
    asks for one: most scenarios have none, and the parse with line numbers cost 5 ms, half
    a small virtual-time run's reading of its scenario."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._lines: dict[tuple[str, ...], int] | None = None

    def get(self, key: tuple[str, ...]) -> int | None:
        if self._lines is None:
            self._lines = text_lines(self.text) if self.text else {}
        return self._lines.get(key)


def check_scenario(sc: Any, base_dir: Path, text: str = "") -> tuple[list[Problem], list[str]]:
    """Problems beyond the schema (files that do not exist, duplicate names) and warnings
    (an API key variable that is not set). Relative trace paths are resolved against
    ``base_dir`` (the scenario's folder) in place."""
    lines = _Lines(text)
    problems: list[Problem] = []
    warnings: list[str] = []
    if found := _trace_problem(sc.trace, base_dir):
        problems.append((f"trace.{found[0]}", lines.get(("trace", found[0])), found[1]))
    names = [e.name or getattr(e, "url", None) or "sim" for e in sc.endpoints]
    for i, n in enumerate(names):
        if n in names[:i]:
            problems.append((f"endpoints.{i}.name", lines.get(("endpoints", str(i))),
                             f"endpoint label {n!r} used twice; give each a distinct name"))
    for i, e in enumerate(sc.endpoints):
        env = getattr(e, "api_key_env", None)
        if env and not os.environ.get(env):
            warnings.append(f"endpoints.{i}.api_key_env: environment variable {env} is not set")
        for field in ("headers", "extra_body"):
            for name in unset_env(getattr(e, field, None) or {}):
                warnings.append(f"endpoints.{i}.{field}: environment variable {name} is not "
                                "set (the run refuses to start without it)")
        if e.kind == "simulated":
            holders: list[tuple[Any, tuple[str, ...]]] = [(e, ("endpoints", str(i), "preset"))]
            d = e.disaggregation
            if d is not None:
                holders += [(pool, ("endpoints", str(i), "disaggregation", name, "preset"))
                            for name, pool in (("prefill", d.prefill), ("decode", d.decode))]
            for holder, key in holders:
                holder.preset, missing = _preset_file(holder.preset, base_dir)
                if missing is not None:
                    problems.append((".".join(key), lines.get(key), missing))
        if e.kind == "simulated" and sc.clock_mode == "virtual" and e.speedup != 1:
            warnings.append(f"endpoints.{i}.speedup: no effect in virtual time (the "
                            "simulator runs on the replay's simulated clock); it applies to "
                            "clock: wall only")
    for j, v in enumerate(sc.variants):
        for key in list(v.set):
            v.set[key] = _variant_presets(key, v.set[key], base_dir,
                                          f"variants.{j}.set -> {key}", problems)
        if found := _variant_trace(sc, v, base_dir):
            problems.append((f"variants.{j}.set -> trace.{found[0]}",
                             lines.get(("variants", str(j), "set")), found[1]))
    if sc.clock_mode == "virtual" and sc.prompt.tokenizer:
        warnings.append("prompt.tokenizer: no effect in virtual time (prompts reach the "
                        "in-process simulator as block hashes, not text)")
    return problems, warnings


def _trace_problem(trace: Any, base_dir: Path) -> tuple[str, str] | None:
    """The trace's field and problem (a file that does not exist, a format no reader
    has, an unknown synth profile), or None; a file (or profile file) found is made
    absolute relative to ``base_dir`` in place."""
    from agentbench.traces.readers import READERS, check_trace_path, looks_like_hub_id
    from agentbench.traces.sources import is_named
    from agentbench.traces.sources import problem as named_problem

    kind = getattr(trace, "kind", None)
    if kind == "synth":
        return _profile_problem(trace, base_dir)
    if kind != "file":
        return None
    if trace.format is not None and trace.format not in READERS:
        return "format", (f"unknown trace format {trace.format!r} (known: "
                          f"{', '.join(READERS)})")
    if is_named(trace.source):
        # builtin:NAME, cache:NAME (traces/sources.py), and a format they cannot take
        why = named_problem(trace.source, trace.format)
        return ("source", why) if why else None
    src = Path(trace.source).expanduser()
    cand = src if src.is_absolute() else base_dir / src
    try:
        found = cand.exists()
        check_trace_path(cand)  # a device, a FIFO, a loop of links
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        found = False
    except InputError as bad:
        return "source", bad.message
    if found:
        trace.source = str(cand.resolve())
    elif not looks_like_hub_id(trace.source, base_dir):
        return "source", (f"no such file or folder: {trace.source} (relative paths are "
                          f"relative to the scenario's folder {base_dir})")
    return None


def _profile_problem(trace: Any, base_dir: Path) -> tuple[str, str] | None:
    """A synth trace's profile: a shipped one's name, or a profile file (made absolute
    relative to ``base_dir`` in place); the run refused any other, after the variants
    before it had run."""
    from agentbench.traces.synth import profile_names

    names = profile_names()
    if trace.profile in names:
        return None
    path = Path(trace.profile).expanduser()
    if path.suffix not in (".yaml", ".yml"):
        return "profile", (f"unknown synth profile {trace.profile!r} (known: "
                           f"{', '.join(names)}; or a profile's .yaml file)")
    cand = path if path.is_absolute() else base_dir / path
    try:
        found = cand.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        found = False
    if not found:
        return "profile", (f"no such profile file: {trace.profile} (relative paths are "
                           f"relative to the scenario's folder {base_dir})")
    trace.profile = str(cand.resolve())
    return None


def _variant_trace(sc: Any, v: Any, base_dir: Path) -> tuple[str, str] | None:
    """The problem of a variant's own trace, checked as the base's is, its file (or
    profile file) made absolute in ``v.set`` where the variant names it: it was looked
    for from the working folder, and not at all before the sweep, so a sweep stopped
    at that variant after the ones before it had run."""
    if not any(key == "trace" or key.startswith("trace.") for key in v.set):
        return None
    try:
        trace = _variant(sc, v).trace
    except (_SetError, _VariantInvalid):  # validate_data said so already
        return None
    found = _trace_problem(trace, base_dir)
    for name in ("source", "profile"):
        whole, value = v.set.get("trace"), getattr(trace, name, None)
        if f"trace.{name}" in v.set and value is not None:
            v.set[f"trace.{name}"] = value
        elif isinstance(whole, dict) and name in whole and value is not None:
            whole[name] = value
    return found


def _variant_presets(key: str, value: Any, base_dir: Path, where: str,
                     problems: list[Problem]) -> Any:
    """A variant's value with every preset file it names (a ``preset`` key, at any depth)
    made absolute relative to the scenario's folder, as the base's are."""
    if isinstance(value, dict):
        return {k: _variant_presets(str(k), x, base_dir, f"{where}.{k}", problems)
                for k, x in value.items()}
    if key.rsplit(".", 1)[-1] != "preset" or not isinstance(value, str):
        return value
    resolved, missing = _preset_file(value, base_dir)
    if missing is not None:
        problems.append((where, None, missing))
    return resolved


def load_scenario(path: str | Path, *, check: bool = True,
                  sets: list[tuple[str, Any]] | None = None,
                  labels: dict[str, str] | None = None) -> Any:
    """Read, validate and check a scenario file; raise ``ScenarioError`` with every problem.
    ``sets`` (dotted key, value) override keys of the file before it is validated; a
    problem under one is shown as ``--set KEY`` (or its entry in ``labels``)."""
    p = Path(path)
    try:
        # at most one byte over the bound: /dev/zero or a huge file is not read whole; a
        # FIFO that no writer opens is a TimeoutError after a while (it waited forever)
        raw = read_head(p, MAX_SCENARIO_CHARS + 1)
    except OSError as e:
        raise InputError(f"cannot read scenario ({e.strerror})", source=str(p)) from None
    if len(raw) > MAX_SCENARIO_CHARS:
        raise InputError(f"larger than {MAX_SCENARIO_CHARS:,} bytes; a scenario is a short "
                         "YAML file", source=str(p))
    try:
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        raise InputError(f"not a text (UTF-8) file: byte {e.start} cannot be decoded",
                         source=str(p)) from None
    if "\x00" in text:
        raise InputError("not a text file (it holds NUL bytes)", source=str(p))
    sc = parse_scenario(text, source=str(p), sets=sets, labels=labels)
    if check:
        problems, _ = check_scenario(sc, p.resolve().parent, text)
        if problems:
            named = {key: f"--set {key}" for key, _ in sets or []} | (labels or {})
            raise ScenarioError(str(p), label_problems(problems, named))
    return sc
