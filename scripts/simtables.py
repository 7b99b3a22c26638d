"""What the what-if table scripts share (``whatif_table.py``, ``pd_table.py``,
``tiers_table.py``, ``frontier_table.py``): every variant of a scenario run in virtual
time in a temporary folder, its summary, and Markdown tables."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentbench.metrics import summarize  # noqa: E402
from agentbench.replay import run  # noqa: E402
from agentbench.scenario.loading import expand_variants, load_scenario  # noqa: E402


def variant_runs(path: Path) -> Iterator[tuple[str, Any, Path, dict[str, Any]]]:
    """(variant name, its scenario, its run folder, its summary) of every variant, run
    one after the other; the folders last until the next variant starts."""
    base = load_scenario(path)
    with tempfile.TemporaryDirectory() as tmp:
        for sc in expand_variants(base):
            if sc.clock_mode != "virtual":
                raise SystemExit(f"{path}: {sc.name} is not in virtual time")
            sc.output.dir, sc.output.run_id = tmp, sc.name
            rd = run(sc, progress=False).run_dir
            yield sc.name.removeprefix(f"{base.name}-"), sc, rd, summarize(rd, write=False)


def md(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *["| " + " | ".join(r) + " |" for r in rows]]


def main(tables: Callable[[Path], str], doc: str | None) -> None:
    """The command line: one scenario path in, its tables printed."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("scenario", type=Path)
    print(tables(ap.parse_args().scenario))
