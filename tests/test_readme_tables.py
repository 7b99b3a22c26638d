"""The simulated tables quoted in the README and docs/simulator.md are what their commands
print, byte for byte (virtual time makes them deterministic)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT


def _quoted(doc: str, script: str, scenario: str, tables: int = 1) -> str:
    """The ``tables`` Markdown tables (separated by one blank line) after the first
    mention of ``python scripts/SCRIPT scenarios/SCENARIO`` in ``doc`` (the command may
    wrap onto the next line)."""
    text = (ROOT / doc).read_text()
    cmd = re.compile(rf"`python\s+scripts/{re.escape(script)}\s+scenarios/"
                     rf"{re.escape(scenario)}`")
    found = cmd.search(text)
    assert found is not None, (doc, script, scenario)
    table = r"^\| variant \|.*?"
    m = re.compile(r"\n\n".join([table] * tables) + r"(?=\n\n)", re.S | re.M).search(
        text, found.end())
    assert m is not None, (doc, scenario)
    return m.group(0)


def _printed(script: str, scenario: str) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / script),
                          str(ROOT / "scenarios" / scenario)], capture_output=True, text=True,
                         check=True, timeout=900)
    return out.stdout.strip()


def test_shared_kv_what_if_table(weka_dir: Path) -> None:
    assert _printed("whatif_table.py", "shared-kv-what-if.yaml") == \
        _quoted("README.md", "whatif_table.py", "shared-kv-what-if.yaml")


@pytest.mark.slow
@pytest.mark.parametrize(("doc", "script", "scenario", "tables"), [
    ("README.md", "whatif_table.py", "scale-out.yaml", 1),
    ("docs/simulator.md", "pd_table.py", "pd-ratio.yaml", 2),
    ("docs/simulator.md", "tiers_table.py", "kv-tiers.yaml", 2),
    ("docs/simulator.md", "frontier_table.py", "moe-frontier.yaml", 1),
    ("docs/simulator.md", "whatif_table.py", "hybrid-attention.yaml", 1),
])
def test_a_quoted_table_is_what_its_script_prints(doc: str, script: str, scenario: str,
                                                  tables: int) -> None:
    assert _printed(script, scenario) == _quoted(doc, script, scenario, tables)
