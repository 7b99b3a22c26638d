"""The simulator's engine compiled by mypyc, opt-in (docs/scale.md#the-engine-compiled).

``python scripts/build_native.py --out DIR`` compiles ``MODULES`` (their code unchanged)
into ``DIR`` with a manifest of their sources' SHA-256. A process started with
``AGENTBENCH_NATIVE=DIR`` then imports those modules from ``DIR`` instead of their
sources, all of them or none: only when the manifest was made by this Python and every
source is still the one compiled (an edited source makes the whole build stale, and the
process runs the sources, saying so in one line on stderr). Without the variable nothing
here runs. Imports only the standard library: ``agentbench.sim`` installs it before any
engine module is imported.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

#: the environment variable naming a build's folder
ENV = "AGENTBENCH_NATIVE"
MANIFEST = "manifest.json"
#: the modules compiled, as one mypyc group (they call each other directly)
MODULES = ("agentbench.sim.kvcache", "agentbench.sim.kvties", "agentbench.sim.engine",
           "agentbench.sim.admission", "agentbench.sim.decoderuns", "agentbench.sim.cost",
           "agentbench.sim.request", "agentbench.sim.router", "agentbench.sim.cluster",
           "agentbench.sim.virtual", "agentbench.sim.slots")

_PACKAGE = Path(__file__).resolve().parent.parent  # the agentbench folder


def source_of(module: str) -> Path:
    """The source file of one of ``MODULES`` (``agentbench.sim.engine`` -> .../sim/engine.py)."""
    return _PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plan(folder: Path) -> dict[str, Path] | str:
    """The extension file of every compiled module (and of the group's shared library)
    in a build folder, or why the build cannot be used (one line)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest.get("ext_suffix") != importlib.machinery.EXTENSION_SUFFIXES[0]:
            return (f"built for {manifest.get('ext_suffix')!r}, this Python loads "
                    f"{importlib.machinery.EXTENSION_SUFFIXES[0]!r}")
        files: dict[str, Path] = {}
        for name, entry in manifest["modules"].items():
            if name not in MODULES:
                return f"{name} is not one of the modules compiled"
            if entry["sha256"] != digest(source_of(name)):
                return f"{source_of(name).name} changed since it was compiled"
            files[name] = folder / entry["file"]
        if set(files) != set(MODULES):
            return "the build lacks " + ", ".join(sorted(set(MODULES) - set(files)))
        shared = manifest["shared"]["name"]
        if not (isinstance(shared, str) and shared.endswith("__mypyc")
                and shared.isidentifier()):
            return f"{shared!r} is not a mypyc group's library"  # nor any module to replace
        files[shared] = folder / manifest["shared"]["file"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"no readable build ({type(e).__name__}: {e})"
    missing = [p.name for p in files.values() if not p.is_file()]
    return f"missing {', '.join(missing)}" if missing else files


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and their shared library) in the build folder."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(name)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(name, str(file))
        return importlib.util.spec_from_file_location(name, file, loader=loader)


def install(environ: Any = os.environ) -> str | None:
    """Use the build named by ``AGENTBENCH_NATIVE``, when set and usable; return why not
    (also said on stderr) when it is set and cannot be used, else None."""
    folder = environ.get(ENV)
    if not folder or any(isinstance(f, _Finder) for f in sys.meta_path):
        return None
    got = plan(Path(folder))
    if isinstance(got, str):
        why = f"agentbench: {ENV}={folder} not used, the engine runs from its sources: {got}"
        print(why, file=sys.stderr)
        return why
    sys.meta_path.insert(0, _Finder(got))
    return None


def compiled() -> bool:
    """Whether this process's engine is the compiled one."""
    from agentbench.sim import engine

    return not engine.__file__.endswith(".py") if engine.__file__ else False
