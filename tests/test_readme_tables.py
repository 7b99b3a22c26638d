"""The README's simulated tables are what their commands print, byte for byte (virtual
time makes them deterministic)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT


def _readme_table(scenario: str) -> str:
    text = (ROOT / "README.md").read_text()
    at = text.index(f"`python scripts/whatif_table.py\nscenarios/{scenario}`") \
        if f"`python scripts/whatif_table.py\nscenarios/{scenario}`" in text \
        else text.index(f"`python scripts/whatif_table.py scenarios/{scenario}`")
    m = re.compile(r"^\| variant \|.*?(?=\n\n)", re.S | re.M).search(text, at)
    assert m is not None
    return m.group(0)


def _printed(scenario: str) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "whatif_table.py"),
                          str(ROOT / "scenarios" / scenario)], capture_output=True, text=True,
                         check=True, timeout=900)
    return out.stdout.strip()


def test_shared_kv_what_if_table(weka_dir: Path) -> None:
    assert _printed("shared-kv-what-if.yaml") == _readme_table("shared-kv-what-if.yaml")


@pytest.mark.slow
def test_scale_out_table() -> None:
    assert _printed("scale-out.yaml") == _readme_table("scale-out.yaml")


@pytest.mark.slow
def test_pd_ratio_tables() -> None:
    """docs/simulator.md's P:D split tables are what scripts/pd_table.py prints."""
    text = (ROOT / "docs" / "simulator.md").read_text()
    at = text.index("`python scripts/pd_table.py scenarios/pd-ratio.yaml`")
    m = re.compile(r"^\| variant \| stage \|.*?\n\n\| variant \|.*?(?=\n\n)", re.S | re.M
                   ).search(text, at)
    assert m is not None
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "pd_table.py"),
                          str(ROOT / "scenarios" / "pd-ratio.yaml")], capture_output=True,
                         text=True, check=True, timeout=900)
    assert out.stdout.strip() == m.group(0)


@pytest.mark.slow
def test_kv_tiers_tables() -> None:
    """docs/simulator.md's KV tiers tables are what scripts/tiers_table.py prints."""
    text = (ROOT / "docs" / "simulator.md").read_text()
    at = text.index("scripts/tiers_table.py scenarios/kv-tiers.yaml`")
    m = re.compile(r"^\| variant \| requests \|.*?\n\n\| variant \|.*?(?=\n\n)", re.S | re.M
                   ).search(text, at)
    assert m is not None
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "tiers_table.py"),
                          str(ROOT / "scenarios" / "kv-tiers.yaml")], capture_output=True,
                         text=True, check=True, timeout=900)
    assert out.stdout.strip() == m.group(0)


@pytest.mark.slow
def test_moe_frontier_and_hybrid_tables() -> None:
    """docs/simulator.md's MoE frontier and hybrid-attention tables are what their
    scripts print."""
    text = (ROOT / "docs" / "simulator.md").read_text()
    for script, scenario, head in (
            ("frontier_table.py", "moe-frontier.yaml", r"\| variant \| agents \|"),
            ("whatif_table.py", "hybrid-attention.yaml", r"\| variant \| GPUs \|")):
        at = text.index(f"scripts/{script} scenarios/{scenario}`")
        m = re.compile(rf"^{head}.*?(?=\n\n)", re.S | re.M).search(text, at)
        assert m is not None, scenario
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / script),
                              str(ROOT / "scenarios" / scenario)], capture_output=True,
                             text=True, check=True, timeout=900)
        assert out.stdout.strip() == m.group(0), scenario
