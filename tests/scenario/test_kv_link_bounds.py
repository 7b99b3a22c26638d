"""A P/D endpoint's KV link is bounded below: at 1e-9 Gb/s one token's KV took a month of
simulated time to move, no request ever finished, and a run bounded by its requests
(``limits.max_requests``) went on for hours of wall time, sampling server metrics every
10 simulated seconds; ``validate`` said ok."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentbench.scenario.endpoints import MIN_LINK_GBPS, KvLink


@pytest.mark.parametrize("gbps", [1e-9, 1e-5, MIN_LINK_GBPS / 2])
def test_a_link_too_slow_to_finish_a_transfer_is_refused(gbps: float) -> None:
    with pytest.raises(ValidationError, match=f"greater than or equal to {MIN_LINK_GBPS}"):
        KvLink.model_validate({"bandwidth_gbps": gbps})


@pytest.mark.parametrize("gbps", [MIN_LINK_GBPS, 1.0, 200.0, 1e6])
def test_a_link_in_range_is_kept(gbps: float) -> None:
    assert KvLink.model_validate({"bandwidth_gbps": gbps}).bandwidth_gbps == gbps
