"""What a request cancelled by a stop that is not its stage's deadline says in its row
(``RunContext.cancel_reason``; the deadline's own rows say "cancelled at the deadline")."""

from __future__ import annotations

import asyncio

import pytest

from agentbench.errors import ResultsWriteError
from agentbench.replay.sigterm import STOPPED, stop_reason


@pytest.mark.parametrize(("e", "says"), [
    (ResultsWriteError("out/r", "No space left on device"),
     "the results could not be written (No space left on device)"),
    (asyncio.CancelledError(), STOPPED),
    (KeyboardInterrupt(), STOPPED),
    (RuntimeError("boom"), "the run stopped on an error (RuntimeError)"),
])
def test_each_stop_names_itself(e: BaseException, says: str) -> None:
    assert stop_reason(e) == says
    assert "deadline" not in says
