"""Where a simulated request's time goes: the ``sim_*_ns`` columns of requests.parquet,
the summary's ``time_breakdown`` and the report's stacked chart (docs/metrics.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from agentbench.experiment import run_experiment
from agentbench.metrics.run import load
from agentbench.metrics.summary import summarize
from agentbench.report.render import render
from agentbench.results import schema as R
from agentbench.results.schema import BREAKDOWN, RequestRecord
from agentbench.scenario.loading import validate_data
from agentbench.transport.finish import finish_record

# round robin: a session's turns change instances, so some load from the shared tier
PD = {"prefill": {"instances": 2, "router": "round_robin"},
      "decode": {"instances": 1},
      "link": {"bandwidth_gbps": 100, "overlap": False}}


def _run(tmp: Path, name: str, **endpoint: Any) -> Path:
    sc = validate_data({
        "name": name, "seed": 0,
        "endpoints": [{"kind": "simulated", "name": "sim", "instances": 3,
                       "shared_tier": {"capacity_blocks": 1_000_000}, **endpoint}],
        "trace": {"kind": "file", "source": "builtin:claude-code-weka",
                  "filters": {"sessions": ["trace_0291", "trace_0277", "trace_0274",
                                           "trace_0175"]}},
        "load": {"kind": "lanes", "concurrency": 4},
        "limits": {"max_requests": 40, "recycle": False},
        "output": {"dir": str(tmp), "run_id": name},
    }, "t")
    return run_experiment(sc, progress=False).runs[0].run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("where")
    return {"agg": _run(tmp, "agg", router="round_robin"),
            "pd": _run(tmp, "pd", disaggregation=PD)}


@pytest.mark.parametrize("which", ["agg", "pd"])
def test_every_requests_parts_sum_to_its_e2e(runs: dict[str, Path], which: str) -> None:
    df = pd.read_parquet(runs[which] / R.REQUESTS_FILE)
    ok = df[df["status"] == R.OK]
    assert len(ok) == 40
    parts = ok[list(BREAKDOWN)].to_numpy(dtype=np.int64)
    e2e = (ok["end_ns"] - ok["sent_ns"]).to_numpy(dtype=np.int64)
    # each part rounded to the ns on its own: six roundings at most
    assert np.abs(parts.sum(axis=1) - e2e).max() <= 6
    assert (parts >= 0).all()
    col = dict(zip(BREAKDOWN, parts.T, strict=True))
    assert col["sim_prefill_ns"].min() > 0 and col["sim_decode_ns"].min() > 0
    # the first token comes after queue, prefill, loads, transfer and the decode queue
    first = (ok["first_token_ns"] - ok["sent_ns"]).to_numpy(dtype=np.int64)
    before_decode = parts[:, :5].sum(axis=1)
    if which == "agg":
        assert (col["sim_transfer_ns"] == 0).all() and (col["sim_decode_queue_ns"] == 0).all()
        assert np.abs(first - before_decode).max() <= 5
    else:
        # every request moved some KV: 0.5 ms latency at least
        assert col["sim_transfer_ns"].min() >= 500_000
        # P/D's decode part holds the first token's step: the first token is later
        assert (first > before_decode).all()
    assert col["sim_tier_load_ns"].max() > 0  # some turns loaded from the shared tier


def test_the_summary_and_the_report_say_where_time_went(runs: dict[str, Path],
                                                        tmp_path: Path) -> None:
    for which, d in runs.items():
        tb = summarize(d, write=False)["overall"]["time_breakdown"]
        df = pd.read_parquet(d / R.REQUESTS_FILE)
        ok = df[(df["status"] == R.OK) & (df["phase"] == R.MEASURE)]
        assert tb["requests"] == len(ok)
        assert tb["mean_ms"]["decode"] == pytest.approx(ok["sim_decode_ns"].mean() / 1e6)
        assert sum(tb["share"].values()) == pytest.approx(1.0)
        assert (tb["mean_ms"]["transfer"] > 0) == (which == "pd")
    html, _ = render([runs["agg"], runs["pd"]], tmp_path / "rep")
    text = html.read_text()
    assert "Where time goes (simulated)" in text
    assert (tmp_path / "rep" / "plots" / "cmp_where_time_goes.png").stat().st_size > 5000


def test_a_run_without_the_parts_reads_as_before(runs: dict[str, Path],
                                                 tmp_path: Path) -> None:
    """A real endpoint's rows (or a folder written before the columns existed) have no
    parts: no breakdown in the summary, no chart."""
    d = tmp_path / "old"
    d.mkdir()
    for f in runs["agg"].iterdir():
        if f.is_file():
            (d / f.name).write_bytes(f.read_bytes())
    table = pq.read_table(d / R.REQUESTS_FILE).drop_columns(list(BREAKDOWN))
    pq.write_table(table, d / R.REQUESTS_FILE)
    assert "time_breakdown" not in summarize(d, write=False)["overall"]
    assert load(d).requests["sim_queue_ns"].isna().all()
    html, _ = render([d], tmp_path / "rep")
    assert "Where time goes" not in html.read_text()
    # beside a run that has them: the chart, and a note naming the run left out
    html, _ = render([runs["pd"], d], tmp_path / "rep2")
    text = html.read_text()
    assert "Where time goes (simulated)" in text and "Not shown: " in text


def test_only_a_finished_simulated_request_has_parts() -> None:
    def rec(**kw: Any) -> RequestRecord:
        return RequestRecord(request_id=1, stage="s", phase="measure", endpoint="e", lane=0,
                             tree_id="t#0", session_id="t", relation="root", copy=0, turn=0,
                             scheduled_ns=0, expected_input_tokens=1,
                             expected_output_tokens=1, potential_cached_tokens=0, **kw)

    row = finish_record(rec(status=R.OK, http_status=200))  # HTTP: nothing known
    assert all(row[c] is None for c in BREAKDOWN)
    parts = (1, 2, 3, 4, 5, 6)
    row = finish_record(rec(status=R.CANCELLED, breakdown_ns=parts))
    assert all(row[c] is None for c in BREAKDOWN)
    row = finish_record(rec(status=R.ERROR, http_status=500, breakdown_ns=parts))
    assert all(row[c] is None for c in BREAKDOWN)
