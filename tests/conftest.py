"""Shared fixtures: the real traces in ../shared/traces (skipped, with the reason, when
missing)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"
WEKA_DIR = SHARED_TRACES / "claude-code-weka"
MOONCAKE_DIR = SHARED_TRACES / "mooncake"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared trace data not found at {path} (it ships beside the repository)")
    return path


@pytest.fixture(scope="session")
def weka_dir() -> Path:
    return _need(WEKA_DIR)


@pytest.fixture(scope="session")
def mooncake_dir() -> Path:
    return _need(MOONCAKE_DIR)


@pytest.fixture(scope="session")
def weka_trace(weka_dir: Path):  # type: ignore[no-untyped-def]
    from agentbench.traces.readers import read_trace

    return read_trace(str(weka_dir), format="weka")
