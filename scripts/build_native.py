"""Compile the simulator's engine with mypyc into a folder of its own (opt-in: see
``agentbench/sim/native.py`` and docs/scale.md#the-engine-compiled).

    python scripts/build_native.py --out build/native      # about a minute; needs a C compiler
    AGENTBENCH_NATIVE=build/native agentbench run scenarios/pd-ratio.yaml

mypyc comes with mypy (``pip install -e '.[dev]'``). The sources are compiled in a
temporary copy of the package, so nothing is written beside them (a compiled module next
to its source would shadow it); the folder gets the extension files and a manifest of the
sources' SHA-256, which decides whether a process may use them.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentbench.sim.native import MANIFEST, MODULES, digest, source_of  # noqa: E402


def build(out: Path) -> dict[str, object]:
    """Compile ``MODULES`` into ``out``; return the manifest written there."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "agentbench", work / "agentbench",
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
        rel = {m: source_of(m).relative_to(ROOT) for m in MODULES}
        subprocess.run([sys.executable, "-m", "mypyc", "--ignore-missing-imports",
                        *map(str, rel.values())], cwd=work, check=True,
                       stdout=subprocess.DEVNULL)
        shared = list(work.glob(f"*__mypyc{suffix}"))
        if len(shared) != 1:
            raise SystemExit(f"expected one shared library, found {len(shared)}")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        modules = {}
        for m in MODULES:
            shutil.copy2(work / rel[m].with_suffix(suffix), out / f"{m}{suffix}")
            # the hash of the copy compiled: a source edited meanwhile makes the build stale
            modules[m] = {"file": f"{m}{suffix}", "sha256": digest(work / rel[m])}
        shutil.copy2(shared[0], out / shared[0].name)
    manifest: dict[str, object] = {
        "ext_suffix": suffix, "modules": modules,
        "shared": {"name": shared[0].name.removesuffix(suffix), "file": shared[0].name}}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "native"),
                    help="the build's folder (replaced); default build/native")
    out = Path(ap.parse_args().out).resolve()
    build(out)
    print(f"compiled {len(MODULES)} modules into {out}; use them with AGENTBENCH_NATIVE={out}")


if __name__ == "__main__":
    main()
