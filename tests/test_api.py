"""The Python API (load, compare) and the example notebook, executed against a results
folder the test writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentbench
from agentbench import records as R
from agentbench.testing.demo import write_demo_run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_run(tmp_path_factory.mktemp("api") / "demo", trees=6, turns=12,
                          concurrency=(2,), seed=4)


def test_import_is_light() -> None:
    code = ("import sys, agentbench; assert callable(agentbench.load); "
            "assert callable(agentbench.compare); "
            "heavy = {'pandas', 'pyarrow', 'matplotlib'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_load(run_dir: Path) -> None:
    r = agentbench.load(run_dir)
    assert (run_dir / R.SUMMARY_FILE).exists()
    n = r.summary["overall"]["requests"]["total"] + r.summary["warmup_requests_excluded"]
    assert len(r.requests) == n
    assert {"ttft_ms", "tpot_ms", "e2e_ms", "context_tokens"} <= set(r.requests.columns)
    assert len(r.sessions) == 6 + 2  # measured trees + warmup trees
    assert set(r.server_metrics["name"]) == {"vllm:prefix_cache_hits_total",
                                             "vllm:prefix_cache_queries_total"}
    assert r.scenario["name"] == "demo"
    m = r.requests[(r.requests.phase == "measure") & (r.requests.status == "ok")]
    assert m["ttft_ms"].median() == pytest.approx(r.summary["overall"]["latency"]["ttft_ms"]["p50"])
    # a second load reads summary.json instead of recomputing it
    mtime = (run_dir / R.SUMMARY_FILE).stat().st_mtime_ns
    assert agentbench.load(run_dir).summary == r.summary
    assert (run_dir / R.SUMMARY_FILE).stat().st_mtime_ns == mtime


def test_compare(run_dir: Path, tmp_path: Path) -> None:
    other = write_demo_run(tmp_path / "slow", trees=6, turns=12, concurrency=(2,), seed=4,
                           ttft_scale=2.0)
    c = agentbench.compare(agentbench.load(run_dir), other)
    assert list(c.table.columns) == ["demo", "slow", "slow vs demo"]
    assert c.table.loc["P50 TTFT", "slow vs demo"] == "2.0x higher"
    assert c.headlines[0].startswith("slow vs demo: throughput")
    assert "P50 TTFT 2.0x higher" in c.headlines[0]
    assert "<table" in c._repr_html_()
    with pytest.raises(ValueError):
        agentbench.compare(run_dir)


@pytest.mark.timeout(240)
def test_notebook_executes(run_dir: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(ROOT / "examples" / "analysis.ipynb", as_version=4)
    old = os.environ.get("AGENTBENCH_RUN")
    os.environ["AGENTBENCH_RUN"] = str(run_dir)
    try:
        nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                resources={"metadata": {"path": str(run_dir.parent)}}).execute()
    finally:
        if old is None:
            os.environ.pop("AGENTBENCH_RUN", None)
        else:
            os.environ["AGENTBENCH_RUN"] = old
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 2  # TTFT vs context, hit rate per turn
    text = "".join(o.get("text", "") for o in outputs)
    assert "TTFT" in text and "hit rate" in text
