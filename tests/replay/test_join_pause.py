"""A joined subagent's recorded pause survives replay (docs/architecture.md#replay): the
parent's join turn goes at the later of its own think target and the child's end plus the
pause the trace recorded after the child, in virtual time where both are exact; and a
recorded fork sent after its sibling continuation replays after it, in every strategy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from agentbench.replay import run
from agentbench.replay.treespec import join_pause_s
from agentbench.scenario.model import Scenario
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.readers import native

NS = 1_000_000_000
BS = 64


def _turn(k: int, t: float, think: float, api: float | None, inp: int, out: int,
          base: int) -> Turn:
    return Turn(turn=k, t=t, think_s=think, api_s=api, input_tokens=inp, output_tokens=out,
                hash_ids=np.arange(base, base + -(-inp // BS), dtype=np.int64),
                block_size=BS)


def _trace(child_api: float | None, child_out: int) -> Trace:
    """Root: turn 0 at 0 s (1 s), turn 1 at 10 s joining the child; the child runs from 1 s
    (end of root turn 0) for one turn of ``child_api`` s. Recorded pause after the child:
    10 - (1 + child_api) s."""
    root = Session(
        session_id="r", parent_id=None, relation="root", parent_turn=None, join_turn=None,
        model=None, source="t", scope="t", start_s=0.0,
        turns=[_turn(0, 0.0, 0.0, 1.0, 640, 8, 0), _turn(1, 10.0, 9.0, 1.0, 1280, 8, 0)])
    child = Session(
        session_id="r/sub", parent_id="r", relation="spawn", parent_turn=0, join_turn=1,
        model=None, source="t", scope="t", start_s=1.0,
        turns=[_turn(0, 0.0, 0.0, child_api, 640, child_out, 10_000)])
    return Trace([root, child], name="join")


def _replay(tmp_path: Path, trace: Trace, name: str,
            timing: dict[str, object] | None = None) -> dict[str, dict[str, int]]:
    path = native.write(trace, tmp_path / f"{name}.parquet")
    sc = Scenario.model_validate({
        "name": name, "seed": 1, "clock": "virtual",
        "endpoints": [{"kind": "simulated", "preset": "h100-llama3-8b", "instances": 1}],
        "trace": {"kind": "file", "source": str(path), "format": "native"},
        "load": {"kind": "lanes", "concurrency": 1},
        "timing": timing or {"strategy": "think-only"},
        "limits": {"max_sessions": 1, "recycle": False},
        "output": {"dir": str(tmp_path), "run_id": name}})
    run_dir = run(sc, progress=False).run_dir
    rows = pq.read_table(run_dir / "requests.parquet").to_pylist()
    assert all(r["status"] == "ok" for r in rows)
    return {f"{r['session_id']}#{r['turn']}": r for r in rows}


def test_pause_after_a_slow_child_is_kept(tmp_path: Path) -> None:
    # recorded: the child took 2 s and the parent resumed 7 s after it; replayed, the child
    # decodes 4,000 tokens and runs far longer than 9 s
    rows = _replay(tmp_path, _trace(child_api=2.0, child_out=4000), "slow")
    child_end = rows["r/sub#0"]["end_ns"]
    root0_end = rows["r#0"]["end_ns"]
    assert child_end > root0_end + 9 * NS  # the child outlasted the join turn's think time
    assert rows["r#1"]["sent_ns"] - child_end == 7 * NS


def test_think_target_holds_when_the_child_is_fast(tmp_path: Path) -> None:
    # recorded: the child took 8 s (pause 1 s); replayed it takes well under a second, so the
    # join turn keeps its own think time from the root's previous response
    rows = _replay(tmp_path, _trace(child_api=8.0, child_out=4), "fast")
    assert rows["r/sub#0"]["end_ns"] < rows["r#0"]["end_ns"] + 2 * NS
    assert rows["r#1"]["sent_ns"] - rows["r#0"]["end_ns"] == 9 * NS


@pytest.mark.parametrize(("api", "want"), [(2.0, 7.0), (9.5, 0.0), (None, None)])
def test_join_pause_from_the_recorded_times(api: float | None, want: float | None) -> None:
    root, child = _trace(child_api=api, child_out=4).sessions
    # a pause recorded as negative (the child ended after the join turn) counts as none
    assert join_pause_s(root, child) == want


@pytest.mark.parametrize("strategy", ["think-only", "original", "api-scaled"])
def test_a_fork_recorded_after_its_sibling_replays_after_it(tmp_path: Path,
                                                             strategy: str) -> None:
    from agentbench.proxy.calls import Call
    from agentbench.proxy.sessionize import sessionize

    ms = 1_000_000

    def call(i: int, start: int, end: int, prefixes: list[int], reply: int) -> Call:
        return Call(index=i, path="/v1/chat/completions", model="m", stream=True, status=200,
                    arrival_ns=start * ms, first_byte_ns=start * ms + ms, end_ns=end * ms,
                    input_tokens=100, output_tokens=10, cached_tokens=None,
                    usage_reported=True, counted_input_tokens=100, hash_ids=[i, 1],
                    block_size=64, prefixes=prefixes, reply=reply, session_key=None,
                    parent_key=None)

    # turn 0 ends at 10 ms; its continuation goes at 20 ms, a fork from turn 0 at 35 ms
    trace, _ = sessionize([call(0, 0, 10, [1, 2], 10), call(1, 20, 30, [1, 2, 10, 11], 20),
                           call(2, 35, 40, [1, 2, 10, 12], 30),
                           call(3, 50, 60, [1, 2, 10, 11, 20, 5], 40)])
    root, fork = trace.sessions
    assert fork.relation == "fork" and fork.parent_turn == 0
    rows = _replay(tmp_path, trace, strategy, {"strategy": strategy, "time_scale": 100})
    assert rows[f"{fork.session_id}#0"]["sent_ns"] > rows[f"{root.session_id}#1"]["sent_ns"]
