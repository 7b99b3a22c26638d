"""Shared fixtures: the real traces in ../shared/traces (skipped, with the reason, when
missing) and agentbench's fast server in its own process. Helpers called as functions are
in ``tests/helpers.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import SHARED_TRACES, fastserver

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


@pytest.fixture
def fast_server() -> Iterator[str]:
    """The URL of ``agentbench.testing.fastserver`` (TTFT 5 ms, ITL 0.2 ms), own process."""
    with fastserver("--ttft", "0.005", "--itl", "0.0002") as url:
        yield url
