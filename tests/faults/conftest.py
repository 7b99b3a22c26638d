"""The fault server fixture (harness in ``harness.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import FaultServer


@pytest.fixture
def fault_server(tmp_path: Path) -> Iterator[Any]:
    made: list[FaultServer] = []

    def make(faults: str = "ok", **kw: Any) -> FaultServer:
        srv = FaultServer(log=tmp_path / f"server{len(made)}.log", faults=faults, **kw)
        made.append(srv)
        return srv.start()

    yield make
    for srv in made:
        srv.kill()
