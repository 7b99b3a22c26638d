"""Weka reader timestamp conventions: kv-cache-tester's own (subagent ``t`` relative to the
subagent start, seconds; a marker's ``t`` is the subagent's end, ``duration_ms`` after its
start), and the tolerated variants (parent's clock, milliseconds, the marker as start)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbench.errors import InputError
from agentbench.traces.readers import read_trace


def req(t: float, n: int, think: float | None = None, api: float | None = None) -> dict:
    r: dict[str, Any] = {"t": t, "type": "n", "in": n * 64, "out": 5,
                         "hash_ids": list(range(1, n + 1))}
    if think is not None:
        r["think_time"] = think
    if api is not None:
        r["api_time"] = api
    return r


def doc(requests: list[dict]) -> dict:
    return {"id": "tr", "block_size": 64, "hash_id_scope": "local", "requests": requests}


def read_doc(tmp_path: Path, d: dict, **options: Any) -> Any:
    f = tmp_path / "tr.json"
    f.write_text(json.dumps(d))
    return read_trace(f, format="weka", **options)


def marker(t: float, reqs: list[dict], agent: str = "a1", **kw: Any) -> dict:
    return {"t": t, "type": "subagent", "agent_id": agent, "requests": reqs, **kw}


def test_subagent_t_relative_to_the_subagent_start(tmp_path: Path) -> None:
    """kv-cache-tester: nested requests' t count from the subagent start (marker t)."""
    tr = read_doc(tmp_path, doc([
        req(0.0, 2), req(10.0, 3),
        marker(20.0, [req(0.0, 1), req(4.0, 2)]),
        req(60.0, 4),
    ]))
    root, child = tr.sessions
    assert child.start_s == 20.0
    assert [t.t for t in child.turns] == [0.0, 4.0]
    assert (child.parent_turn, child.join_turn) == (1, 2)


def test_subagent_t_on_the_parent_clock_reads_the_same(tmp_path: Path) -> None:
    tr = read_doc(tmp_path, doc([
        req(0.0, 2), req(10.0, 3),
        marker(20.0, [req(20.0, 1), req(24.0, 2)]),
        req(60.0, 4),
    ]))
    child = tr.sessions[1]
    assert child.start_s == 20.0
    assert [t.t for t in child.turns] == [0.0, 4.0]


def test_nested_subagents_on_the_parent_clock(tmp_path: Path) -> None:
    tr = read_doc(tmp_path, doc([
        req(0.0, 2),
        marker(20.0, [req(20.0, 1), marker(30.0, [req(30.0, 1), req(33.0, 2)], agent="g"),
                      req(50.0, 2)]),
        req(60.0, 4),
    ]))
    by = tr.by_id()
    grandchild = by["tr/a1/g"]
    assert grandchild.start_s == 30.0  # 20 (child start) + 10 on the child's own clock
    assert [t.t for t in grandchild.turns] == [0.0, 3.0]
    assert (grandchild.parent_turn, grandchild.join_turn) == (0, 1)


def test_subagent_starts_duration_before_the_marker(tmp_path: Path) -> None:
    """As recorded: the marker's t (60.5) is the subagent's end, 40 s after its start."""
    tr = read_doc(tmp_path, doc([
        req(0.0, 2, api=20.0),
        marker(60.5, [req(0.0, 1, api=2.0), req(30.0, 2, api=5.0)], duration_ms=40_000),
        req(70.0, 4),
    ]))
    child = tr.sessions[1]
    assert child.start_s == 20.5  # 60.5 - 40
    assert [t.t for t in child.turns] == [0.0, 30.0]  # last one ends at 20.5 + 35 < 60.5
    assert (child.parent_turn, child.join_turn) == (0, 1)


def test_subagent_start_marker_reads_t_as_the_start(tmp_path: Path) -> None:
    tr = read_doc(tmp_path, doc([
        req(0.0, 2), marker(60.5, [req(0.0, 1)], duration_ms=40_000), req(70.0, 4),
    ]), subagent_start="marker")
    assert tr.sessions[1].start_s == 60.5


def test_subagent_start_is_never_before_the_parent_request_it_follows(
        tmp_path: Path) -> None:
    tr = read_doc(tmp_path, doc([
        req(0.0, 2), req(10.0, 3), marker(30.0, [req(0.0, 1)], duration_ms=25_000),
        req(40.0, 4),
    ]))
    assert tr.sessions[1].start_s == 10.0  # 30 - 25 = 5 is before request 1 (t 10)


def test_subagent_end_on_the_parent_clock(tmp_path: Path) -> None:
    """Nested requests on the parent's clock count from the start, t - duration."""
    tr = read_doc(tmp_path, doc([
        req(0.0, 2), marker(60.0, [req(20.0, 1), req(24.0, 2)], duration_ms=40_000),
        req(70.0, 4),
    ]))
    child = tr.sessions[1]
    assert child.start_s == 20.0
    assert [t.t for t in child.turns] == [0.0, 4.0]


@pytest.mark.parametrize("bad", ["end", None, 3])
def test_unknown_subagent_start_is_an_input_error(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(InputError) as e:
        read_doc(tmp_path, doc([req(0.0, 2)]), subagent_start=bad)
    assert e.value.field == "subagent_start"


def test_negative_duration_names_the_marker(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        read_doc(tmp_path, doc([req(0.0, 2), marker(5.0, [req(0.0, 1)], duration_ms=-1)]))
    assert e.value.field == "duration_ms" and e.value.where == "requests[1]"


def test_milliseconds_are_detected_from_recorded_think_and_api_time(tmp_path: Path) -> None:
    tr = read_doc(tmp_path, doc([
        req(0.0, 2, think=0.0, api=2.0), req(5000.0, 3, think=3.0, api=1.5),
        req(9500.0, 4, think=3.0, api=1.0),
    ]))
    assert [t.t for t in tr.sessions[0].turns] == [0.0, 5.0, 9.5]


def test_seconds_with_long_idle_gaps_stay_seconds(tmp_path: Path) -> None:
    # think_time holds the idle gap, as in the real traces: gaps match think + api
    tr = read_doc(tmp_path, doc([
        req(0.0, 2, think=0.0, api=8.8), req(13.0, 3, think=4.2, api=3.0),
        req(3075.0, 4, think=3059.0, api=2.0),
    ]))
    assert [t.t for t in tr.sessions[0].turns] == [0.0, 13.0, 3075.0]


def test_async_launched_subagent_runs_in_the_background(tmp_path: Path) -> None:
    tr = read_doc(tmp_path, doc([
        req(0.0, 2), marker(5.0, [req(0.0, 1)], status="async_launched"), req(9.0, 3),
    ]))
    child = tr.sessions[1]
    assert (child.parent_turn, child.join_turn) == (0, None)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["requests"][1].pop("in"), "in"),
    (lambda d: d["requests"][1].__setitem__("out", -3), "out"),
    (lambda d: d["requests"][1].__setitem__("hash_ids", list(range(50))), "hash_ids"),
])
def test_bad_requests_name_the_request_and_field(tmp_path: Path, mutate: Any,
                                                 field: str) -> None:
    d = doc([req(0.0, 2), req(10.0, 3)])
    mutate(d)
    with pytest.raises(InputError) as e:
        read_doc(tmp_path, d)
    assert e.value.field == field and e.value.where == "requests[1]"
    assert e.value.source and e.value.source.endswith("tr.json")


def test_truncated_json_is_an_input_error(tmp_path: Path) -> None:
    f = tmp_path / "tr.json"
    f.write_text(json.dumps(doc([req(0.0, 2)]))[:-10])
    with pytest.raises(InputError, match="invalid JSON") as e:
        read_trace(f, format="weka")
    assert e.value.where and e.value.where.startswith("line 1")


def _folder(tmp_path: Path, ids: dict[str, str]) -> Path:
    """One file per entry, ``file stem -> document id``; ``broken`` is not JSON."""
    d = tmp_path / "weka"
    d.mkdir()
    for stem, sid in ids.items():
        body = {**doc([req(0, 2, api=1.0)]), "id": sid}
        (d / f"{stem}.json").write_text(json.dumps(body))
    (d / "broken.json").write_text("{not json")
    return d


def test_a_session_filter_reads_only_the_files_it_names(tmp_path: Path) -> None:
    from agentbench.scenario.model import TraceSource
    from agentbench.traces.load import load_scenario_trace

    d = _folder(tmp_path, {"a": "a", "b": "b", "c": "c"})
    with pytest.raises(InputError, match="broken"):  # read whole, the bad file is named
        read_trace(d, format="weka")
    tr = read_trace(d, format="weka", sessions=["c", "a"])  # the bad file is never opened
    assert [s.session_id for s in tr.sessions] == ["a", "c"]
    spec = TraceSource.model_validate({"kind": "file", "source": str(d), "format": "weka",
                                       "filters": {"sessions": ["c"]}})
    assert [s.session_id for s in load_scenario_trace(spec, 0).sessions] == ["c"]


def test_a_filter_whose_files_do_not_match_reads_the_whole_folder(tmp_path: Path) -> None:
    d = _folder(tmp_path, {"a": "a", "b": "other"})  # b.json holds session "other"
    for wanted in (["b"], ["a", "missing"]):
        with pytest.raises(InputError, match="broken"):
            read_trace(d, format="weka", sessions=wanted)
    # a named file that is bad: the folder is read whole, its bad files named as usual
    tr = read_trace(d, format="weka", sessions=["broken"], skip_bad=True)
    assert {s.session_id for s in tr.sessions} == {"a", "other"}
    assert len(tr.skipped) == 1 and "broken" in tr.skipped[0]
    (d / "broken.json").unlink()
    tr = read_trace(d, format="weka", sessions=["other"])
    assert {s.session_id for s in tr.sessions} == {"a", "other"}  # the filter picks later
