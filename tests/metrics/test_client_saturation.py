"""The saturation verdict (``summary.json: client_saturated``): the client says when it did
not deliver the offered load, from the stored stamps alone.

Hand-built runs give the arithmetic; an end-to-end run with the client's event loop
starved on purpose (a task that blocks it 50 ms in every 55 ms, as a client without CPU
would be) shows the warning in summary.json, the terminal summary and the time-base
warnings the report prints."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentbench.metrics import format_summary, summarize
from agentbench.metrics.saturation import (
    IN_FLIGHT_MIN_LAG_MS,
    IN_FLIGHT_RATIO,
    LAG_P50_MS,
    LAG_P99_MS,
)
from agentbench.results import schema as R
from tests.helpers import MS, fastserver
from tests.helpers import req as hand_req


def req(**kw: Any) -> dict[str, Any]:
    """A measured one-token request of 10 prompt tokens at stage c=4, ``kw`` over it."""
    return hand_req(**{"stage": "c=4", "token_events": 1, "token_event_tokens": [1],
                       "prompt_tokens": 10, "completion_tokens": 1, "cached_tokens": 0,
                       "expected_input_tokens": 10, "expected_output_tokens": 1, **kw})


def lanes_run(d: Path, lag_ms: float, lanes: int = 4, turns: int = 5,
              dur_ms: float = 100) -> Path:
    """``lanes`` lanes, each ``turns`` requests of ``dur_ms`` back to back, every send
    ``lag_ms`` after its scheduled time."""
    rows = []
    for lane in range(lanes):
        t = 0
        for k in range(turns):
            sent = t + int(lag_ms * MS)
            end = sent + int(dur_ms * MS)
            first = sent + int(dur_ms * MS) // 2
            rows.append(req(request_id=len(rows), lane=lane, tree_id=f"t{lane}#0",
                            session_id=f"t{lane}", turn=k, scheduled_ns=t, sent_ns=sent,
                            first_token_ns=first, last_token_ns=first,
                            end_ns=end, token_event_ns=[first]))
            t = end
    d.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=R.REQUESTS_SCHEMA), d / R.REQUESTS_FILE)
    pq.write_table(pa.Table.from_pylist([], schema=R.SESSIONS_SCHEMA), d / R.SESSIONS_FILE)
    (d / R.RUN_FILE).write_text(json.dumps({
        "scenario": {"name": "hand"},
        "stages": [{"label": "c=4", "lanes": lanes}]}))
    return d


def test_light_run_is_not_saturated(tmp_path: Path) -> None:
    # lag 0.2 ms; in flight / wanted = 100 / (100 + 0.2) = 0.998 per request
    s = summarize(lanes_run(tmp_path / "run", lag_ms=0.2))
    v = s["client_saturated"]
    assert v["saturated"] is False and v["reasons"] == [] and v["advice"] is None
    f = v["figures"]["c=4"]
    assert f["schedule_lag_p99_ms"] == pytest.approx(0.2)
    assert f["in_flight_ratio"] == pytest.approx(100 / 100.2, abs=1e-4)
    assert f["lanes"] == 4
    assert not any("saturated" in w for w in s["time_base"]["warnings"])
    assert "client saturated" not in format_summary(s)


def test_starved_run_is_saturated(tmp_path: Path) -> None:
    # lag p50 30 ms > 10 ms; in flight / wanted = 100 / 130 = 0.769 < 0.95; window =
    # 5 x 130 = 650 ms: mean in flight 4 x 5 x 100 / 650 = 3.08 of 4 x 5 x 130 / 650 = 4
    s = summarize(lanes_run(tmp_path / "run", lag_ms=30))
    v = s["client_saturated"]
    assert v["saturated"] is True
    f = v["figures"]["c=4"]
    assert f["schedule_lag_p99_ms"] == pytest.approx(30)
    assert f["in_flight_ratio"] == pytest.approx(100 / 130, abs=1e-4)
    assert f["in_flight_mean"] == pytest.approx(2000 / 650, abs=0.01)
    assert f["in_flight_wanted_mean"] == pytest.approx(4.0, abs=0.01)
    assert v["thresholds"] == {"schedule_lag_p50_ms": LAG_P50_MS,
                               "schedule_lag_p99_ms": LAG_P99_MS,
                               "in_flight_ratio": IN_FLIGHT_RATIO,
                               "in_flight_min_lag_ms": IN_FLIGHT_MIN_LAG_MS}
    assert len(v["reasons"]) == 2 and "--workers" in v["advice"]
    text = format_summary(s)
    assert "client saturated: schedule lag p50 30.0 ms > 10 ms" in text
    assert "mean in flight 3.1 of 4.0 wanted of 4 lanes (77% < 95%, mean lag 30.0 ms)" in text
    assert any(w.startswith("client saturated") for w in s["time_base"]["warnings"])


def test_a_client_s_own_lag_on_very_short_requests_is_not_saturation(tmp_path: Path) -> None:
    """2 ms requests (an instant test server) sent 0.15 ms late each: 93% of the wanted
    in flight, but the lag is the client's own cost per request, which more CPU would not
    take away: no verdict. The same share of shortfall from a 1.5 ms lag on 20 ms
    requests is one (its lag p50 is under 10 ms: the in-flight figure alone says it)."""
    s = summarize(lanes_run(tmp_path / "short", lag_ms=0.15, dur_ms=2))
    f = s["client_saturated"]["figures"]["c=4"]
    assert f["in_flight_ratio"] == pytest.approx(2 / 2.15, abs=1e-3)
    assert f["in_flight_ratio"] < IN_FLIGHT_RATIO
    assert f["schedule_lag_mean_ms"] == pytest.approx(0.15)
    assert s["client_saturated"]["saturated"] is False
    s = summarize(lanes_run(tmp_path / "late", lag_ms=1.5, dur_ms=20))
    v = s["client_saturated"]
    assert v["saturated"] is True and len(v["reasons"]) == 1
    assert "(93% < 95%, mean lag 1.5 ms)" in v["reasons"][0]


def test_a_mean_in_flight_under_one_is_not_shown_as_0_0(tmp_path: Path) -> None:
    """One lane, 20 ms requests 1.5 ms late, a long think time between them: the means in
    flight are a few hundredths, shown with two digits, not '0.0 of 0.0'."""
    d = lanes_run(tmp_path / "run", lag_ms=1.5, lanes=1, turns=2, dur_ms=20)
    t = pq.read_table(d / R.REQUESTS_FILE).to_pylist()
    shift = 2000 * MS  # the second turn 2 s after the first one ended
    for k in ("scheduled_ns", "sent_ns", "first_token_ns", "last_token_ns", "end_ns"):
        t[1][k] += shift
    t[1]["token_event_ns"] = [t[1]["first_token_ns"]]
    pq.write_table(pa.Table.from_pylist(t, schema=R.REQUESTS_SCHEMA), d / R.REQUESTS_FILE)
    v = summarize(d)["client_saturated"]
    assert v["saturated"] is True
    assert "mean in flight 0.02 of 0.021 wanted" in v["reasons"][0], v["reasons"]


def trace(roots: int, turns: int, think_s: float) -> Any:
    from agentbench.traces.model import Session, Trace, Turn

    sessions = []
    for r in range(roots):
        ts = [Turn(turn=k, t=float(k), think_s=think_s, api_s=None, input_tokens=64 * (k + 2),
                   output_tokens=16,
                   hash_ids=np.arange(1, k + 3, dtype=np.int64) + 100 * r, block_size=64)
              for k in range(turns)]
        sessions.append(Session(f"s{r}", None, "root", None, None, None, "t", "x", 0.0, ts))
    return Trace(sessions)


@pytest.fixture
def per_event_server() -> Iterator[str]:
    with fastserver("--per-event") as url:
        yield url


@pytest.mark.timeout(120)
async def test_starved_client_warns_end_to_end(tmp_path: Path, per_event_server: str) -> None:
    """The client's loop blocked 50 ms in every 55 ms: a lane's next turn, due 20 ms after
    its last answer, is sent when the loop runs again, so most sends are late, by up to
    50 ms."""
    from agentbench.replay import run_scenario
    from agentbench.scenario.model import Scenario

    sc = Scenario.model_validate({
        "name": "starved",
        "endpoints": [{"kind": "openai", "url": per_event_server, "model": "m",
                       "ignore_eos": True}],
        "trace": {"kind": "file", "source": "synthetic"},
        "load": {"kind": "lanes", "concurrency": 8},
        "timing": {"time_scale": 1.0, "idle_cap_s": None},
        "limits": {"recycle": False},
        "output": {"dir": str(tmp_path), "run_id": "starved"},
        "server_metrics": {"enabled": False},
    })
    stop = asyncio.Event()

    async def starve() -> None:
        while not stop.is_set():
            time.sleep(0.05)  # the loop gets no CPU
            await asyncio.sleep(0.005)

    burner = asyncio.ensure_future(starve())
    try:
        res = await run_scenario(sc, trace=trace(8, 6, 0.02), progress=False)
    finally:
        stop.set()
        await burner
    s = summarize(res.run_dir)
    v = s["client_saturated"]
    assert v["saturated"] is True, v
    assert any(r.startswith(("schedule lag", "mean in flight")) for r in v["reasons"])
    assert "client saturated" in format_summary(s)
    on_disk = json.loads((res.run_dir / R.SUMMARY_FILE).read_text())
    assert on_disk["client_saturated"]["saturated"] is True


def test_a_hit_rate_above_the_traces_potential_is_explained(tmp_path: Path) -> None:
    """"usage hit 15.9%, potential 0.0%" once stood unexplained (the server had the run's
    prompts cached from an earlier run of the same seed): the summary says what it means."""
    rows = [req(request_id=i, sent_ns=i * 200 * MS, first_token_ns=i * 200 * MS + 10 * MS,
                last_token_ns=i * 200 * MS + 10 * MS, end_ns=i * 200 * MS + 11 * MS,
                token_event_ns=[i * 200 * MS + 10 * MS], cached_tokens=cached,
                potential_cached_tokens=potential)
            for i, (cached, potential) in enumerate([(8, 0), (8, 0), (0, 0)])]
    pq.write_table(pa.Table.from_pylist(rows, schema=R.REQUESTS_SCHEMA),
                   tmp_path / R.REQUESTS_FILE)
    (tmp_path / R.RUN_FILE).write_text(json.dumps({"scenario": {"name": "hand"}}))
    text = format_summary(summarize(tmp_path))
    assert "potential 0.0%" in text and "usage above potential" in text
    rows[0]["potential_cached_tokens"] = rows[1]["potential_cached_tokens"] = 8
    pq.write_table(pa.Table.from_pylist(rows, schema=R.REQUESTS_SCHEMA),
                   tmp_path / R.REQUESTS_FILE)
    assert "usage above potential" not in format_summary(summarize(tmp_path))


def test_a_long_event_loop_stall_is_named_even_with_no_row_to_judge(tmp_path: Path) -> None:
    """20,000 lanes building their first prompts at once stalled the client's loop 8 s, and
    a 10 s run sent nothing: no row, so no verdict, and nothing said why. The longest
    stall in run.json's client_health (the parent's or a worker's) is named from 1 s."""
    from agentbench.metrics.saturation import STALL_WARN_MS, stall_warning

    def health(ms: float) -> dict[str, Any]:
        return {"loop_stall_max_ms": ms, "loop_stalls_over_10ms": 1}

    line = stall_warning({"client_health": health(8027.0)}, "wall")
    assert line is not None and line.startswith("the client's event loop stalled for 8.0 s")
    assert "--workers" in line and "saturated" not in line
    sharded = {"client_health": {"parent": health(3.0), "workers": [health(1.0),
                                                                    health(2500.0)]}}
    assert "stalled for 2.5 s" in (stall_warning(sharded, "wall") or "")
    assert stall_warning({"client_health": health(STALL_WARN_MS - 1)}, "wall") is None
    assert stall_warning({"client_health": health(8027.0)}, "virtual") is None
    assert stall_warning({}, "wall") is None
    # in the summary, where the time base's warnings are
    d = lanes_run(tmp_path / "run", lag_ms=0.2)
    info = json.loads((d / R.RUN_FILE).read_text())
    (d / R.RUN_FILE).write_text(json.dumps({**info, "client_health": health(8027.0)}))
    s = summarize(d)
    assert any(w.startswith("the client's event loop stalled") for w in
               s["time_base"]["warnings"])
