"""Reading a scenario file's YAML, bounded: size, nesting and alias expansion are capped so
that no file makes the reader recurse, hang or fill memory; duplicate keys are refused;
every message is one printable line. ``agentbench.scenario.loading`` validates what it reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentbench.errors import InputError

#: (key path, line or None, message)
Problem = tuple[str, int | None, str]

#: characters (and bytes of a file) at most in a scenario; the pure-Python YAML reader
#: takes about a second per MB, and a real scenario is a few KB
MAX_SCENARIO_CHARS = 1 << 20
#: nesting levels at most (the YAML composer recurses once per level)
MAX_DEPTH = 64
#: YAML nodes at most once every alias is expanded: a "billion laughs" file (anchors of
#: aliases of aliases) is refused while it is read, not expanded
MAX_NODES = 100_000
#: longest key path or message shown in an error line
MAX_SHOWN = 200


def one_line(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` as one printable line: line breaks and control characters escaped, cut at
    ``limit`` characters (a key or value from the file may hold anything)."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return out if len(out) <= limit else out[:limit] + "..."


class ScenarioError(InputError):
    """A scenario with one or more problems; ``problems`` holds (key path, line, message)."""

    def __init__(self, source: str, problems: list[tuple[str, int | None, str]]) -> None:
        self.problems = [(one_line(p), ln, one_line(m)) for p, ln, m in problems]
        first = self.problems[0]
        where = f"line {first[1]}" if first[1] else None
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{first[0]}: {first[2]}{more}", source=source, where=where)

    def lines(self) -> list[str]:
        out = []
        for path, line, msg in self.problems:
            loc = f"{self.source}:{line}" if line else f"{self.source}"
            out.append(f"{loc}: {path}: {msg}")
        return out


def read_small_text(path: str | Path, what: str, max_bytes: int) -> str:
    """The text of a short file the user names (a preset, gate rules), or an
    ``InputError`` naming it in one line: not a regular file (a folder; a FIFO would
    block), unreadable, over ``max_bytes`` (read at most one byte past them: /dev/zero is
    not read whole), not UTF-8, or holding NUL bytes. ``what`` names the file's kind."""
    import stat

    p = Path(path)
    try:
        if p.exists() and not stat.S_ISREG(p.stat().st_mode):
            raise InputError(f"not a regular file (a {what} is a short YAML file)",
                             source=one_line(str(p)))
        with p.open("rb") as f:
            raw = f.read(max_bytes + 1)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        why = getattr(e, "strerror", None) or one_line(str(e), 80)
        raise InputError(f"cannot read {what} ({why})", source=one_line(str(p))) from None
    if len(raw) > max_bytes:
        raise InputError(f"larger than {max_bytes:,} bytes; a {what} is a short YAML file",
                         source=str(p))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not a text (UTF-8) file: byte {e.start} cannot be decoded",
                         source=str(p)) from None
    if "\x00" in text:
        raise InputError("not a text file (it holds NUL bytes)", source=str(p))
    return text


# ---------------------------------------------------------------- reading YAML

_BOOL_TAG = "tag:yaml.org,2002:bool"
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _ScenarioLoader(yaml.SafeLoader):
    """SafeLoader with bounds (nesting, alias expansion), no duplicate keys, and the YAML 1.1
    booleans on/off/yes/no read as plain strings when they are keys (``retry: {on: [429]}``
    means the key ``on``, not ``True``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._nodes = 0
        self._anchor_nodes: dict[str, int] = {}

    def _count(self, n: int, mark: Any) -> None:
        self._nodes += n
        if self._nodes > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"more than {MAX_NODES:,} values once aliases are expanded (an "
                "alias bomb?)", mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()
        if self.check_event(yaml.AliasEvent):
            if event.anchor in self.anchors:
                size = self._anchor_nodes.get(event.anchor)
                if size is None:
                    raise yaml.composer.ComposerError(
                        None, None, f"alias *{one_line(event.anchor, 40)} is inside its own "
                        "anchor (a cycle)", event.start_mark)
                self._count(size, event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        start = self._nodes
        self._count(1, event.start_mark)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._anchor_nodes[event.anchor] = self._nodes - start
        if isinstance(node, yaml.MappingNode):
            for key, _ in node.value:
                if (isinstance(key, yaml.ScalarNode) and key.tag == _BOOL_TAG
                        and key.style is None and key.value.lower() not in ("true", "false")):
                    key.tag = _STR_TAG
        return node


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode,
                    deep: bool = False) -> Any:
    """A mapping that rejects a key given twice (YAML keeps the last one silently, so a
    duplicated section would quietly replace the first). Merge keys (``<<: *base``) are
    taken as YAML has them: the mapping's own keys over the merged ones (they were refused
    as "could not determine a constructor for the tag ...merge")."""
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
        except TypeError:
            continue
        if dup:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {one_line(repr(key), 60)} is given twice in one mapping",
                key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


def _bounded_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:  # Python refuses int() of more than 4,300 digits
        raise yaml.constructor.ConstructorError(
            None, None, "an integer far too long to be a count or a seed",
            node.start_mark) from None


_ScenarioLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                _unique_mapping)
_ScenarioLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def yaml_problem(e: yaml.YAMLError, text: str) -> Problem:
    """One problem line from a YAML error (PyYAML's own text spans several lines)."""
    if isinstance(e, yaml.reader.ReaderError):
        at = text.count("\n", 0, e.position) + 1
        return "(yaml)", at, f"character #x{e.character:04x} is not allowed in YAML"
    mark = getattr(e, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(e, "problem", None) or str(e)
    context = getattr(e, "context", None)
    return "(yaml)", line, f"{context}: {problem}" if context else problem


def read_yaml(text: str, source: str) -> tuple[Any, Any]:
    """The document's data and its composed node tree (for lines), within the bounds."""
    if len(text) > MAX_SCENARIO_CHARS:
        raise ScenarioError(source, [("(root)", None, f"longer than {MAX_SCENARIO_CHARS:,} "
                                      "characters; a scenario is a short YAML file")])
    try:
        loader = _ScenarioLoader(text)  # refuses control characters right away
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        raise ScenarioError(source, [yaml_problem(e, text)]) from None
    return data, node


def key_lines(root: Any) -> dict[tuple[str, ...], int]:
    """Line (1-based) of every mapping key and sequence item, by key path."""
    out: dict[tuple[str, ...], int] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                p = (*path, str(k.value))
                out.setdefault(p, k.start_mark.line + 1)
                walk(v, p)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                p = (*path, str(i))
                out.setdefault(p, v.start_mark.line + 1)
                walk(v, p)

    if root is not None:
        walk(root, ())
    return out


def text_lines(text: str) -> dict[tuple[str, ...], int]:
    try:
        return key_lines(read_yaml(text, "")[1])
    except ScenarioError:
        return {}


# ---------------------------------------------------------------- validating
