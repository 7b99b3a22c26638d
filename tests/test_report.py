"""Reports for one run and a comparison of three: files, sections, plots, escaping, and
that the report shows the summary's figures rather than its own."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentbench import records as R
from agentbench.cli import app
from agentbench.metrics.catalog import METRICS, change_phrase, format_value
from agentbench.testing.demo import write_demo_run

EVIL = "<script>alert('x')</script>"
EVIL_MSG = '<img src=x onerror="alert(1)"> & |pipe|'
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def poison(d: Path) -> Path:
    """Hostile strings where traces and scenarios put text: description, error message."""
    run = json.loads((d / R.RUN_FILE).read_text())
    run["scenario"]["description"] = EVIL
    run["scenario"]["name"] = "demo " + EVIL
    (d / R.RUN_FILE).write_text(json.dumps(run))
    t = pq.read_table(d / R.REQUESTS_FILE)
    msg = pc.if_else(pc.is_null(t["error_message"]), None, EVIL_MSG)
    t = t.set_column(t.schema.get_field_index("error_message"), "error_message", msg)
    pq.write_table(t, d / R.REQUESTS_FILE)
    return d


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("report")
    cfg = {"trees": 8, "turns": 20, "concurrency": (2, 8), "fail_rate": 0.03}
    return [
        poison(write_demo_run(root / "nocache", hit=0.05, ttft_scale=1.5, seed=1, **cfg)),  # type: ignore[arg-type]
        write_demo_run(root / "affinity", hit=0.9, seed=2, **cfg),  # type: ignore[arg-type]
        write_demo_run(root / "affinity-x2", hit=0.9, seed=3, gpus=2, **cfg),  # type: ignore[arg-type]
    ]


def _images(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"',
                                                   html)]


def test_one_run(three: list[Path], tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(three[0]), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    for title in ("Headline", "Latency distributions", "The agentic curves",
                  "Throughput and requests in flight", "Agents (session trees)", "Cost",
                  "Errors", "Scenario and environment"):
        assert f"<h2>{title}" in html and f"## {title}" in md
    imgs = _images(html)
    assert len(imgs) == 8 and all(i.startswith(PNG_MAGIC) and len(i) > 5000 for i in imgs)
    for f in re.findall(r"\]\(plots/([^)]+)\)", md):
        assert (tmp_path / "plots" / f).read_bytes().startswith(PNG_MAGIC)
    # self-contained: no external resource, no script
    assert "<script" not in html and "http://" not in html and "https://" not in html
    # the headline table shows the summary's own figures
    s = json.loads((three[0] / R.SUMMARY_FILE).read_text())
    ttft = format_value(METRICS["ttft_p50"], s["overall"]["latency"]["ttft_ms"]["p50"])
    assert f"<td>P50 TTFT</td><td>{ttft}</td>" in html
    assert f"| P50 TTFT | {ttft} |" in md


def test_strings_are_escaped(three: list[Path], tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(three[0]), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    assert EVIL not in html and "<img src=x" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html  # errors table
    assert "&lt;script&gt;" in html  # scenario block
    assert "<img src=x" not in md and "&lt;img src=x" in md
    assert "\\|pipe\\|" in md  # a pipe cannot break a Markdown table


def test_three_runs(three: list[Path], tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", *map(str, three), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    assert "<p>nocache vs" not in html  # the first run is the reference
    assert "affinity vs nocache: throughput" in html
    assert "affinity-x2 vs nocache" in md
    sums = [json.loads((d / R.SUMMARY_FILE).read_text()) for d in three]
    hr = [s["overall"]["hit_rate"]["usage"]["value"] for s in sums]
    assert f"hit rate {100 * hr[0]:.1f}% → {100 * hr[1]:.1f}%" in html
    phrase = change_phrase(METRICS["ttft_p50"],
                           sums[0]["overall"]["latency"]["ttft_ms"]["p50"],
                           sums[1]["overall"]["latency"]["ttft_ms"]["p50"])
    assert phrase and phrase.endswith("lower") and phrase in html
    # overlaid CDFs, curves, and the two Pareto plots of the sweeps
    for alt in ("TTFT CDF", "E2E CDF", "TTFT vs context", "hit rate vs turn",
                "Pareto: throughput/GPU vs interactivity", "Pareto: throughput/GPU vs P50 E2E"):
        assert f'alt="{alt}"' in html
    assert all(i.startswith(PNG_MAGIC) for i in _images(html))


def test_published_phrases() -> None:
    m = METRICS
    assert change_phrase(m["throughput"], 100.0, 380.0) == "throughput 3.8x"
    assert change_phrase(m["ttft_p50"], 4600.0, 100.0) == "P50 TTFT 46x lower"
    assert change_phrase(m["e2e_p50"], 86.0, 10.0) == "P50 E2E 8.6x lower"
    assert change_phrase(m["hit_rate"], 0.017, 0.922) == "hit rate 1.7% → 92.2%"
    assert change_phrase(m["ttft_p50"], 100.0, 130.0) == "P50 TTFT 1.3x higher"
    assert change_phrase(m["ttft_p50"], 100.0, None) is None


def test_report_bad_input(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "results folder not found" in res.output
