"""A simulated endpoint's ``speedup`` is bounded (0.001-1e6): 1e308 made the simulator's
clock infinite and every request of a wall-clock run (or of ``serve-sim``) wait forever;
1e-300 made every step last forever."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.scenario.model import SimulatedEndpoint


@pytest.mark.parametrize("speedup", [1e308, 1e7, 1e-300, 0])
def test_a_speedup_out_of_range_is_refused(speedup: float) -> None:
    with pytest.raises(ValidationError):
        SimulatedEndpoint.model_validate({"kind": "simulated", "speedup": speedup})
    r = CliRunner().invoke(app, ["serve-sim", "--speedup", repr(speedup)])
    assert r.exit_code == 2 and r.output.startswith("error: serve-sim options: speedup"), \
        r.output


@pytest.mark.parametrize("speedup", [1e-3, 1.0, 2000, 1e6])
def test_a_speedup_in_range_is_kept(speedup: float) -> None:
    cfg = SimulatedEndpoint.model_validate({"kind": "simulated", "speedup": speedup})
    assert cfg.speedup == speedup


def test_hardware_gpus_is_at_most_a_million() -> None:
    """``hardware.gpus: 1180591620717411303424`` was taken, and its cost printed in 22
    digits."""
    from agentbench.scenario.model import Hardware

    assert Hardware(gpus=1e6).gpus == 1e6
    with pytest.raises(ValidationError, match="less than or equal to 1000000"):
        Hardware(gpus=2**70)
