"""Scaling and truncation keep prefix structure, so the potential hit rate survives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentbench.errors import InputError
from agentbench.scenario.model import TraceFilters
from agentbench.traces.load import apply_filters
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.stats import potential_cached_tokens, trace_stats
from agentbench.traces.transform import block_grouping, scale, truncate


def _trace() -> Trace:
    def t(i: int, ids: list[int], inp: int) -> Turn:
        return Turn(turn=i, t=float(i), think_s=0.0, api_s=None, input_tokens=inp,
                    output_tokens=100, hash_ids=np.array(ids, dtype=np.int64), block_size=64)

    a = Session("a", None, "root", None, None, "m", "x", "s", 0.0,
                [t(0, [1, 2, 3, 4], 256), t(1, [1, 2, 3, 4, 5, 6, 7, 8], 512)])
    b = Session("b", None, "root", None, None, "m", "x", "s", 10.0,
                [t(0, [1, 2, 9, 10], 256)])
    return Trace([a, b], name="hand")


def test_block_grouping_picks_whole_token_blocks() -> None:
    assert block_grouping(64, 0.5) == (1, 32)
    assert block_grouping(64, 1 / 16) == (1, 4)
    k, size = block_grouping(64, 0.01)  # 0.64 tokens per block: merge until ~whole
    assert k * 64 * 0.01 >= 1 and abs(size - k * 0.64) / (k * 0.64) <= 0.02


def test_scale_by_half_keeps_every_share() -> None:
    tr = scale(_trace(), 0.5)
    a1 = tr.sessions[0].turns[1]
    assert (a1.input_tokens, a1.output_tokens, a1.block_size) == (256, 50, 32)
    assert list(a1.hash_ids) == [1, 2, 3, 4, 5, 6, 7, 8]
    # potential: a/1 re-sends a/0's 4 blocks (4 x 32 = 128), b/0 re-sends 1, 2 (64)
    assert potential_cached_tokens(tr.sessions) == {("a", 0): 0, ("a", 1): 128, ("b", 0): 64}
    tr.validate()


def test_scale_with_merged_blocks_shares_only_equal_prefixes() -> None:
    tr = scale(_trace(), 1 / 128)  # 0.5 token per block: merge pairs into 1-token blocks
    a0, a1 = tr.sessions[0].turns
    b0 = tr.sessions[1].turns[0]
    assert a0.block_size == 1 and len(a0.hash_ids) == 2
    assert list(a1.hash_ids[:2]) == list(a0.hash_ids)
    assert b0.hash_ids[0] == a0.hash_ids[0] and b0.hash_ids[1] != a0.hash_ids[1]
    tr.validate()


def test_truncate_caps_prompts_and_ids() -> None:
    tr = truncate(_trace(), 300)
    a1 = tr.sessions[0].turns[1]
    assert a1.input_tokens == 300 and list(a1.hash_ids) == [1, 2, 3, 4, 5]
    tr.validate()


def test_bad_factor_is_an_input_error() -> None:
    with pytest.raises(InputError):
        scale(_trace(), 0)
    with pytest.raises(InputError):
        truncate(_trace(), 0)


def test_weka_potential_survives_scaling(weka_trace: Trace) -> None:
    base = trace_stats(weka_trace).potential_hit_rate
    for factor in (0.1, 0.02):
        st = trace_stats(scale(weka_trace, factor))
        assert st.potential_hit_rate == pytest.approx(base, abs=0.01)
        assert st.input_tokens["p50"] == pytest.approx(
            trace_stats(weka_trace).input_tokens["p50"] * factor, rel=0.01)


def test_filters_keep_whole_trees(weka_trace: Trace) -> None:
    only = apply_filters(weka_trace, TraceFilters(with_subagents=True), seed=0)
    assert len(only.roots()) == 9 and len(only.sessions) == 9 + 28
    first3 = apply_filters(weka_trace, TraceFilters(max_sessions=3, shuffle=True), seed=1)
    again = apply_filters(weka_trace, TraceFilters(max_sessions=3, shuffle=True), seed=1)
    assert [s.session_id for s in first3.roots()] == [s.session_id for s in again.roots()]
    assert len(first3.roots()) == 3
    first3.validate()


@pytest.mark.parametrize("factor", ["1e-300", "0.0009", "nan"])
def test_a_scale_below_the_scenarios_bound_is_one_line(factor: str) -> None:
    """``traces stats --scale 1e-300`` (and ``convert``) made every prompt one token where
    a scenario's ``trace.transform.scale`` is refused below 0.001; the same bound now, one
    line, exit 2. 0.001 itself is taken."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    args = ["traces", "stats", "builtin:mooncake-synthetic", "--scale"]
    res = CliRunner().invoke(app, [*args, factor])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "field '--scale': scale factor must be in [0.001, 1]" in res.output
    assert CliRunner().invoke(app, [*args, "0.001"]).exit_code == 0


def test_a_bad_scale_is_refused_before_the_trace_is_read(tmp_path: Path) -> None:
    """``--scale 2`` was checked after the read (minutes for a large trace) and named
    ``scale``, not the option typed: a source that does not exist shows which comes
    first."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    for cmd in (["stats"], ["convert", "-o", str(tmp_path / "x.parquet")]):
        res = CliRunner().invoke(app, ["traces", *cmd, str(tmp_path / "nope.jsonl"),
                                       "--scale", "2"])
        assert res.exit_code == 2, res.output
        assert res.output == ("error: field '--scale': scale factor must be in [0.001, 1] "
                              "(below, prompts shrink to nothing), got 2\n"), res.output
