"""The package layering of docs/architecture.md, enforced: each package of ``agentbench``
may import only the packages declared below it (every import counts: top-level, inside a
function, under ``TYPE_CHECKING``). The declaration itself must be acyclic, so no package
cycle can pass; a second check finds cycles between modules of the whole product."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "agentbench"

#: package (or root module) -> what it may import besides itself and ``errors``. Anyone
#: may read ``agentbench.__version__``; ``agentbench/__init__`` is the lazy facade over
#: ``api``. ``testing`` (fake servers, demo runs) is imported by no product package.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "traces": set(),
    "scenario": {"traces"},
    "prompts": {"traces"},
    "results": {"scenario", "traces"},
    "sim": {"scenario", "traces", "prompts"},
    "transport": {"prompts", "results", "scenario", "sim", "traces"},
    "replay": {"transport", "prompts", "results", "scenario", "sim", "traces"},
    "metrics": {"results", "scenario", "traces"},
    "engines": {"scenario", "traces", "prompts"},
    "proxy": {"scenario", "traces", "results", "transport"},
    "report": {"metrics", "results", "scenario", "traces"},
    "experiment": {"engines", "metrics", "replay", "report", "results", "scenario", "sim",
                   "traces"},
    "api": {"experiment", "metrics", "report"},
    "cli": {"api", "engines", "experiment", "metrics", "prompts", "proxy", "replay",
            "report", "results", "scenario", "sim", "traces", "transport"},
    "testing": {"prompts", "replay", "results", "scenario", "sim", "traces", "transport"},
    "__init__": {"api"},
}


def unit_of(module: str) -> str:
    """``agentbench.replay.tree`` -> ``replay``; ``agentbench`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path, top_only: bool = False) -> list[tuple[str, int]]:
    """Every ``agentbench`` module ``path`` imports (``from pkg import name``: the module
    ``pkg.name`` when there is one, else ``pkg``), with its line; ``top_only``: only the
    statements run when the module loads (not in functions or ``TYPE_CHECKING``)."""
    mod = module_of(path, root)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    tree = ast.parse(path.read_bytes(), str(path))
    nodes = tree.body if top_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                as_path = root.parent / sub.replace(".", "/")
                is_module = as_path.with_suffix(".py").exists() or as_path.is_dir()
                out.append((sub if is_module or base == root.name else base, node.lineno))
    return [(m, line) for m, line in out if m == root.name or m.startswith(root.name + ".")]


def violations(root: Path, allowed: dict[str, set[str]]) -> list[str]:
    """Imports between units that ``allowed`` does not declare, as ``file:line: a -> b``."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        src = unit_of(module_of(path, root))
        if src not in allowed:
            bad.append(f"{path.relative_to(root.parent)}: {src} is not declared in ALLOWED")
            continue
        for target, line in imports_of(path, root):
            if target == f"{root.name}.__version__":
                continue
            dst = unit_of(target)
            if dst in (src, "errors") or dst in allowed[src]:
                continue
            bad.append(f"{path.relative_to(root.parent)}:{line}: {src} -> {dst} ({target})")
    return bad


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of nodes, first repeated last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)) is not None:
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)) is not None:
            return found
    return None


def test_the_declared_layers_are_acyclic() -> None:
    assert cycle(ALLOWED) is None


def test_every_import_follows_the_layers() -> None:
    assert violations(ROOT, ALLOWED) == []


def test_no_import_cycle_between_modules() -> None:
    """Module-level imports only (a function's import runs after both modules loaded)."""
    mods = {module_of(p, ROOT) for p in ROOT.rglob("*.py")}
    graph = {module_of(p, ROOT): {m for m, _ in imports_of(p, ROOT, top_only=True)} & mods
             for p in ROOT.rglob("*.py")}
    assert cycle(graph) is None


def test_the_check_fails_on_an_upward_import(tmp_path: Path) -> None:
    """The same check over a copy of the package with one upward import added (transport
    reading the replay's tree), and with a package missing from the declaration."""
    import shutil

    copy = tmp_path / "agentbench"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__", "*.parquet",
                                                             "*.yaml", "*.json"))
    assert violations(copy, ALLOWED) == []
    target = copy / "transport" / "http.py"
    target.write_text(target.read_text() + "\nfrom agentbench.replay.tree import TreeRun\n")
    bad = violations(copy, ALLOWED)
    assert len(bad) == 1 and "transport -> replay (agentbench.replay.tree)" in bad[0]
    (copy / "newpkg").mkdir()
    (copy / "newpkg" / "__init__.py").write_text("")
    assert any("newpkg is not declared" in b for b in violations(copy, ALLOWED))


@pytest.mark.parametrize("graph,expect", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
])
def test_cycle_finder(graph: dict[str, set[str]], expect: list[str] | None) -> None:
    assert cycle(graph) == expect
