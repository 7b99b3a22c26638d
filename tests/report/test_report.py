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

from agentbench.cli import app
from agentbench.metrics.catalog import METRICS, format_value
from agentbench.report.compare import change, change_phrase, run_labels, verdict
from agentbench.results import schema as R
from agentbench.testing.demo import write_demo_run
from tests.helpers import write_run

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
    # 2 CDFs, 4 curves, throughput timeline, makespan, and (two sweep stages) the AgentX
    # chart and the swim lanes
    assert len(imgs) == 10 and all(i.startswith(PNG_MAGIC) and len(i) > 5000 for i in imgs)
    for alt in ("AgentX: throughput per GPU vs interactivity", "swim lanes"):
        assert f'alt="{alt}"' in html
    for f in re.findall(r"\]\(plots/([^)]+)\)", md):
        assert (tmp_path / "plots" / f).read_bytes().startswith(PNG_MAGIC)
    # self-contained: no external resource, no script
    assert "<script" not in html and "http://" not in html and "https://" not in html
    # the headline table shows the summary's own figures: a sweep's stages (its load
    # points) side by side, the pooled figure last and named so
    s = json.loads((three[0] / R.SUMMARY_FILE).read_text())
    assert len(s["stages"]) == 2
    ttft = [format_value(METRICS["ttft_p50"], b["latency"]["ttft_ms"]["p50"])
            for b in [*s["stages"].values(), s["overall"]]]
    assert "<td>P50 TTFT</td>" + "".join(f"<td>{t}</td>" for t in ttft) in html
    assert f"| P50 TTFT | {' | '.join(ttft)} |" in md
    assert f"| metric | {' | '.join(s['stages'])} | all stages, pooled |" in md
    # and every row of the stage table it replaced
    for label in ("input throughput/GPU", "output throughput/GPU", "P50 interactivity"):
        assert f"| {label} | " in md, label
    # where the GPU count of every per-GPU figure comes from (a real endpoint: the
    # scenario's word, unchecked)
    gpus = "Per-GPU figures and self-hosted cost count 1 GPU: hardware.gpus as the " \
        "scenario states (not checked: a real endpoint"
    assert gpus in md and gpus in html


def test_a_simulated_run_s_report_states_gpus_warmth_and_agents(tmp_path: Path) -> None:
    """The quickstart's report: its GPUs are what it models, TTFT and hit rate by cache
    warmth as summary.json has them, and how many judged agents were good."""
    from agentbench.replay import run
    from agentbench.scenario.loading import load_scenario
    from tests.helpers import SCENARIOS

    sc = load_scenario(SCENARIOS / "quickstart.yaml")
    sc.output.dir = str(tmp_path)
    d = run(sc, progress=False).run_dir
    res = CliRunner().invoke(app, ["report", str(d), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "count 4 GPUs: hardware.gpus, equal to what the simulated endpoints model" in md
    s = json.loads((d / R.SUMMARY_FILE).read_text())
    warm = s["by_warmth"]
    assert {w["warmth"] for w in warm} == {"cold", "partly cached", "warm"}
    for w in warm:
        row = (f"| {w['warmth']} | {w['requests']:,} | {w['ttft_ms_p50']:,.1f} | "
               f"{w['ttft_ms_p90']:,.1f} |")
        assert row in md
    g = s["overall"]["goodput"]
    line = f"{g['good_agents']:,} of {g['agents_judged']:,} judged agents good"
    assert g["agents_judged"] == 8 and line in md and line in html


def test_strings_are_escaped(three: list[Path], tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(three[0]), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    assert EVIL not in html and "<img src=x" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html  # errors table
    assert "&lt;script&gt;" in html  # scenario block
    # Markdown: backslash escapes, never an HTML entity (the file reads as written)
    assert re.search(r"(?<!\\)<img src=x", md) is None and "\\<img src=x" in md
    assert 'onerror="alert(1)"' in md
    assert re.search(r"&(#x?[0-9a-f]+|quot|amp|lt|gt|apos);", md, re.I) is None
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
    assert "1.0x" not in html and "1.0x" not in md
    assert re.search(r"&(#x?[0-9a-f]+|quot|amp|lt|gt|apos);", md, re.I) is None
    # the table: one column per run (named: the demo runs share a scenario name, so by run
    # id), potential and achieved hit rate, their ratio, throughput split per GPU, cost
    assert "<th>nocache</th><th>affinity</th><th>affinity-x2</th>" in html
    for row in ("potential hit rate", "achieved/potential", "input throughput/GPU",
                "output throughput/GPU", "$/agent", "P50 interactivity"):
        assert f"<td>{row}</td>" in html
    assert '<tr class="key"><td>P50 TTFT</td>' in html and "| **P50 TTFT** |" in md
    phrase = change_phrase(METRICS["ttft_p50"],
                           sums[0]["overall"]["latency"]["ttft_ms"]["p50"],
                           sums[1]["overall"]["latency"]["ttft_ms"]["p50"])
    assert phrase and phrase.endswith("lower") and phrase in html
    # overlaid CDFs, curves, the AgentX chart and E2E Pareto plot, each run's swim lanes
    for alt in ("TTFT CDF", "E2E CDF", "TTFT vs context", "hit rate vs turn",
                "AgentX: throughput per GPU vs interactivity",
                "Pareto: throughput/GPU vs P50 E2E", "swim lanes nocache",
                "swim lanes affinity-x2"):
        assert f'alt="{alt}"' in html
    assert all(i.startswith(PNG_MAGIC) for i in _images(html))


def test_changes_in_words() -> None:
    """Under 1.05x a change is in percent; within 0.5% (or printing alike) it is 'same',
    never '1.0x lower'."""
    m = METRICS
    assert change(m["tpot_p50"], 27.3, 27.0) == "1.1% lower"
    assert change(m["throughput"], 100.0, 104.0) == "4.0% higher"
    assert change(m["throughput"], 100.0, 100.3) == "same"
    assert change(m["hit_rate"], 0.5, 0.5) == "same"
    assert change(m["error_rate"], 0.0, 0.0) == "same"
    assert change(m["ttft_p50"], 100.0, None) == "-"
    assert change(m["throughput"], 100.0, 90.0) == "1.1x lower"
    # a value that prints as zero gets no ratio (it read "2970000x lower" beside $0.0000)
    assert change(m["cost_per_agent"], 0.0297, 1e-8) == "$0.0297 → $0.0000"
    assert change(m["cost_per_agent"], 1e-8, 0.0297) == "$0.0000 → $0.0297"
    assert change(m["cost_per_agent"], 0.0297, 0.0101) == "2.9x lower"


def test_changes_are_judged_by_each_metric_s_direction() -> None:
    m = METRICS
    assert verdict(m["ttft_p50"], 100.0, 60.0) == "better"
    assert verdict(m["ttft_p50"], 100.0, 160.0) == "worse"
    assert verdict(m["throughput"], 100.0, 160.0) == "better"
    assert verdict(m["hit_rate"], 0.5, 0.2) == "worse"
    assert verdict(m["error_rate"], 0.0, 0.1) == "worse"
    assert verdict(m["throughput"], 100.0, 100.3) is None  # 'same'
    assert verdict(m["ttft_p50"], None, 1.0) is None
    assert verdict(m["hit_rate_potential"], 0.5, 0.9) is None  # the workload's
    # what the workload would cost at an API's prices: not the serving's doing
    for name in ("api_cost", "api_cost_per_agent", "api_cost_per_mtok"):
        assert verdict(m[name], 1.28, 1.37) is None, name
    assert verdict(m["api_over_self_hosted"], 2.0, 3.0) == "better"


def test_a_report_marks_changes_better_or_worse(three: list[Path], tmp_path: Path) -> None:
    """In the comparison table each change cell is marked by its metric's direction
    (green or red in HTML, the word in Markdown); the potential hit rate is not."""
    res = CliRunner().invoke(app, ["report", *map(str, three), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    sums = [json.loads((d / R.SUMMARY_FILE).read_text()) for d in three]
    for name, label in (("hit_rate", "hit rate"), ("ttft_p50", "P50 TTFT"),
                        ("throughput", "throughput")):
        met = METRICS[name]
        base, cand = (met.value(s["overall"]) for s in sums[:2])
        want = verdict(met, base, cand)
        assert want is not None
        cell = f'<td class="{want}">{change(met, base, cand)}</td>'
        row = next(r for r in html.split("<tr") if f"<td>{label}</td>" in r)
        assert cell in row
        assert f"| {change(met, base, cand)} ({want}) |" in md
    potential = next(r for r in html.split("<tr") if "<td>potential hit rate</td>" in r)
    assert 'class="better"' not in potential and 'class="worse"' not in potential
    assert "better or worse" in html and "(worse)" in md and "(better)" in md
    # these runs set SLOs: goodput is judged against them, under its plain label
    assert all(s["overall"]["goodput"]["slos"] for s in sums)
    assert "<td>goodput</td>" in html and "(no SLOs)" not in html


def test_goodput_without_slos_says_so() -> None:
    """With no SLO in any run compared, goodput is the share that succeeded: 100% beside a
    TTFT 400x worse must not read as SLOs met."""
    from agentbench.report.render import row_label

    none, some = {"goodput": {"slos": {}}}, {"goodput": {"slos": {"ttft_ms": 2000.0}}}
    assert row_label("goodput", [none, none]) == "goodput (no SLOs)"
    assert row_label("agent_goodput", [none]) == "agent goodput (no SLOs)"
    assert row_label("goodput", [none, some]) == "goodput"
    assert row_label("ttft_p50", [none]) == "P50 TTFT"


def test_run_labels() -> None:
    """Variant runs are named by variant (the shared scenario prefix dropped); equal names
    fall back to run ids."""
    def s(name: str, rid: str) -> dict[str, object]:
        return {"run": {"name": name, "run_id": rid}}

    assert run_labels([s("kv-round-robin", "kv-round-robin-20260101-000000"),
                       s("kv-shared-tier", "kv-shared-tier-20260101-000001")]) == \
        ["round-robin", "shared-tier"]
    assert run_labels([s("quickstart", "a-1"), s("mooncake", "b-2")]) == \
        ["quickstart", "mooncake"]
    assert run_labels([s("demo", "nocache"), s("demo", "affinity")]) == \
        ["nocache", "affinity"]
    assert run_labels([s("demo", "x"), s("demo", "x")]) == ["x", "x (2)"]


def test_pareto_front() -> None:
    from agentbench.report.charts import pareto_front

    # (interactivity, throughput/GPU): (30, 500) is beaten by (40, 600) on both axes
    pts = [(10.0, 900.0), (30.0, 500.0), (40.0, 600.0), (20.0, 800.0), (5.0, 850.0)]
    assert pareto_front(pts) == [0, 3, 2]
    # x lower is better (E2E): (5, 850) is now on the front, (40, 600) is not
    assert pareto_front(pts, x_higher_better=False) == [4, 0]


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


def test_an_output_that_is_a_file_is_one_line_and_exit_2(three: list[Path],
                                                         tmp_path: Path) -> None:
    """``-o`` naming a file (or a path under one) is bad input: it exited 1 with
    "File exists" or "Not a directory" and "--debug shows where"."""
    f = tmp_path / "notes.txt"
    f.write_text("keep me")
    for out in (f, f / "sub"):
        res = CliRunner().invoke(app, ["report", str(three[0]), "-o", str(out)])
        assert res.exit_code == 2, res.output
        assert res.output.count("\n") == 1 and "--output" in res.output \
            and "not a folder" in res.output, res.output
    assert f.read_text() == "keep me"


def test_chart_axes_fit_the_points_they_draw() -> None:
    """AgentX points a few percent apart (36.5-37.8 tok/s per user) were a vertical line
    crammed at the right edge of an axis from zero; points spread widely keep zero."""
    from agentbench.report.charts import _span

    lo, hi = _span([36.5, 37.8])
    assert 30 < lo < 36.5 and 37.8 < hi < 45
    assert _span([5.0, 100.0]) == (0.0, pytest.approx(112.0))
    assert _span([0.0, 0.0]) == (0.0, 1.0)
    # a zoomed axis says so in its label
    from agentbench.report.charts import _from_zero

    assert _from_zero(lo) == f" (axis from {lo:.3g}, not 0)" and _from_zero(0.0) == ""
    # tokens/s per GPU from 2,110: it read "axis from 2.11e+03" under ticks of 2500, 3000
    assert _from_zero(2110.5) == " (axis from 2,110, not 0)"
    assert _from_zero(1_234_567.0) == " (axis from 1,230,000, not 0)"


def test_reference_picks_the_run_others_are_compared_against(tmp_path: Path) -> None:
    runs = [write_demo_run(tmp_path / n, seed=i, hit=h, name=n, trees=3, turns=4)
            for i, (h, n) in enumerate(((0.95, "kv-affinity"), (0.1, "kv-round-robin"),
                                        (0.9, "kv-shared-tier")))]
    args = ["report", *map(str, runs), "-o", str(tmp_path / "cmp")]
    res = CliRunner().invoke(app, [*args, "--reference", "round-robin"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "cmp" / "report.md").read_text()
    assert "Reference: round-robin" in md  # labels drop the prefix the runs share
    assert "shared-tier vs round-robin" in md and "affinity vs round-robin" in md
    same = CliRunner().invoke(app, [*args, "-r", str(runs[2])])  # a folder given works too
    assert same.exit_code == 0 and "Reference: shared-tier" in (
        tmp_path / "cmp" / "report.md").read_text()
    for bad in ("kv-", "nothing"):  # several, or none: one line, exit 2
        res = CliRunner().invoke(app, [*args, "-r", bad])
        assert res.exit_code == 2 and "name exactly one" in res.output
        assert res.output.count("\n") == 1
    # a path that is none of the runs is refused (it chose the run of that last name)
    res = CliRunner().invoke(app, [*args, "-r", str(tmp_path / "elsewhere" / "kv-affinity")])
    assert res.exit_code == 2 and "is none of the runs given" in res.output, res.output


def test_a_reference_named_exactly_wins_over_names_it_starts(tmp_path: Path) -> None:
    """Runs ``a`` and ``a-1``: ``-r a`` is ``a`` (it was refused as matching both)."""
    runs = [write_demo_run(tmp_path / n, seed=i, hit=0.5, name=n, trees=2, turns=2)
            for i, n in enumerate(("a-1", "a"))]
    res = CliRunner().invoke(app, ["report", *map(str, runs), "-o", str(tmp_path / "c"),
                                   "-r", "a"])
    assert res.exit_code == 0, res.output
    assert "Reference: a (" in (tmp_path / "c" / "report.md").read_text()


def test_a_comparison_of_different_workloads_says_so(three: list[Path],
                                                     tmp_path: Path) -> None:
    """``report`` compares runs whose fingerprints differ (a sweep over load, two traces)
    as ``gate`` and ``compare`` would refuse to; it once did so without a word. The
    comparison and the terminal now name the fields that differ; runs of one workload get
    no such line."""
    import shutil

    runs = []
    for i, d in enumerate(three[1:]):
        copy = tmp_path / f"r{i}"
        shutil.copytree(d, copy)
        info = json.loads((copy / R.RUN_FILE).read_text())
        info["fingerprint"] = {"version": 1, "trace": "abc", "load": {"lanes": 4 * (i + 1)},
                               "time_base": "virtual"}
        (copy / R.RUN_FILE).write_text(json.dumps(info))
        runs.append(copy)
    res = CliRunner().invoke(app, ["report", *map(str, runs), "-o", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    said = "the runs differ in load (their fingerprints"
    assert said in res.output
    assert said in (tmp_path / "a" / "report.md").read_text()
    assert said in (tmp_path / "a" / "report.html").read_text()
    info = json.loads((runs[1] / R.RUN_FILE).read_text())
    info["fingerprint"]["load"] = {"lanes": 4}
    (runs[1] / R.RUN_FILE).write_text(json.dumps(info))
    res = CliRunner().invoke(app, ["report", *map(str, runs), "-o", str(tmp_path / "b")])
    assert res.exit_code == 0 and "differ in" not in res.output
    assert "differ in" not in (tmp_path / "b" / "report.md").read_text()
    # one run recorded before the trace hash changed (fingerprint version 2): its trace is
    # not compared, and the report says so
    info["fingerprint"]["version"], info["fingerprint"]["trace"] = 2, "def"
    (runs[1] / R.RUN_FILE).write_text(json.dumps(info))
    res = CliRunner().invoke(app, ["report", *map(str, runs), "-o", str(tmp_path / "c")])
    said = ("hashed by two fingerprint versions and could not be compared (version 1 in "
            f"{json.loads((runs[0] / R.RUN_FILE).read_text())['run_id']} and 2 in "
            f"{info['run_id']})")
    assert res.exit_code == 0 and said in res.output and "differ in" not in res.output
    assert said in (tmp_path / "c" / "report.md").read_text()


def test_stage_labels_that_would_overlap_are_left_out() -> None:
    """Ten runs' points crowd together on the AgentX chart: a label that would cover one
    already placed is left out (they were drawn over each other, unreadable)."""
    from agentbench.report import charts
    from agentbench.report.plots import plt_module

    plt = plt_module()
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    charts._stage_labels(ax, [(10, 50, "c=32, 18.5 in flight", "C0"),
                              (12, 50.5, "c=64, 49.1 in flight", "C1"),  # on the first
                              (10, 80, "c=64, 47.7 in flight", "C2"),
                              (80, 50, "c=32", "C3")])
    assert [t.get_text() for t in ax.texts] == ["c=32, 18.5 in flight",
                                                "c=64, 47.7 in flight", "c=32"]
    plt.close(fig)


def test_plots_without_data_say_why_instead_of_empty_axes(three: list[Path],
                                                          tmp_path: Path) -> None:
    """A run where every request failed drew empty TTFT/E2E CDFs and empty TTFT curves,
    and in a comparison it (and a run with no TPOT) vanished from the plots without a
    word. Now the report says which run is left out of what, and why."""
    failed = write_demo_run(tmp_path / "allfailed", trees=3, turns=4, fail_rate=1.0,
                            name="allfailed")
    res = CliRunner().invoke(app, ["report", str(failed), "-o", str(tmp_path / "one")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "one" / "report.md").read_text()
    assert "No measured request succeeded: no latency to draw." in md
    assert "no TTFT to draw against context length or turn index" in md
    assert not {"ttft_ms_cdf.png", "ttft_vs_context.png", "ttft_vs_turn.png"} & {
        p.name for p in (tmp_path / "one" / "plots").iterdir()}
    res = CliRunner().invoke(app, ["report", str(three[1]), str(failed),
                                   "-o", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "cmp" / "report.md").read_text()
    assert "Not drawn: allfailed (no successful measured request)." in md
    assert "Not on the interactivity chart: allfailed" in md
    assert "Not on the E2E chart: allfailed" in md


def test_a_cdf_of_one_request_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of exactly one request was in the CDF's legend but nowhere on it: one value
    is one point, and a line through one point draws nothing."""
    import numpy as np

    from agentbench.report import plots

    drawn: list[tuple[str, int, str]] = []

    def keep(fig: object) -> bytes:
        for ln in fig.axes[0].get_lines():  # type: ignore[attr-defined]
            drawn.append((ln.get_label(), len(ln.get_xdata()), str(ln.get_marker())))
        plots.plt_module().close(fig)
        return b""

    monkeypatch.setattr(plots, "png", keep)
    plots.cdf([("one", np.array([30.0])), ("many", np.linspace(1, 100, 500))], "TTFT", "t")
    (one,) = [d for d in drawn if d[0] == "one"]
    assert one[1] == 1 and one[2] not in ("None", "", " ")


def test_a_comparison_says_which_runs_did_not_complete(three: list[Path],
                                                       tmp_path: Path) -> None:
    """A killed run's figures cover part of it; its changes were shown in the comparison's
    headlines without a word (only its own section, further down, said so), and judged:
    a run cut 5 s in showed its self-hosted cost "$10.50 -> $0.0000" as better and its
    headline line ended empty. Its changes are now shown, not judged; the same run whole
    gets verdicts."""
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(three[2], cut)
    info = json.loads((cut / R.RUN_FILE).read_text())
    info["status"] = "killed"
    (cut / R.RUN_FILE).write_text(json.dumps(info))
    (cut / R.SUMMARY_FILE).unlink(missing_ok=True)
    comparisons = {}
    for name, runs in (("whole", [three[1], three[2]]), ("cut", [three[1], cut]),
                       ("cut first", [cut, three[1]])):
        out = tmp_path / name.replace(" ", "-")
        res = CliRunner().invoke(app, ["report", *map(str, runs), "-o", str(out)])
        assert res.exit_code == 0, res.output
        md = (out / "report.md").read_text()
        comparisons[name] = md.split("## Comparison", 1)[1].split("\n## ", 1)[0]
        html = (out / "report.html").read_text()
        judged = 'class="better"' in html or 'class="worse"' in html
        assert judged == (name == "whole"), name
    assert "(better)" in comparisons["whole"] or "(worse)" in comparisons["whole"]
    for name in ("cut", "cut first"):
        comparison = comparisons[name]
        assert "(killed) did not complete: its figures cover part of the run" in comparison
        assert "(better)" not in comparison and "(worse)" not in comparison, comparison
        assert "(not judged: affinity-x2 did not complete)" in comparison, comparison
        assert "nor a change of or against a run that did not complete" in comparison
    assert "did not complete" not in comparisons["whole"]


def test_the_warmth_table_shows_a_dash_where_a_group_has_no_figure(tmp_path: Path) -> None:
    """Cold requests that all failed have no TTFT: their cells were left blank, where
    every other table of the report shows '-'."""
    failed = write_demo_run(tmp_path / "f", trees=2, turns=3, fail_rate=1.0)
    res = CliRunner().invoke(app, ["report", str(failed), "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r" / "report.md").read_text()
    rows = [ln for ln in md.splitlines()
            if ln.startswith(("| cold |", "| warm |", "| ended without usage |"))]
    assert rows and all("|  |" not in ln and "| - |" in ln for ln in rows), rows


def test_a_run_with_no_hit_rate_draws_no_empty_hit_chart(tmp_path: Path) -> None:
    """A run stopped before any measured request ended has no hit rate, achieved or
    potential: its report drew empty hit-rate axes (-0.04% to 0.04%) and now says why."""
    d = write_run(tmp_path / "empty", [])
    res = CliRunner().invoke(app, ["report", str(d), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "no hit rate to draw against context length or turn index" in md
    assert not {"hit_vs_context.png", "hit_vs_turn.png"} & {
        p.name for p in (tmp_path / "rep" / "plots").glob("*.png")}


def test_a_run_given_twice_is_one_line_not_a_run_against_itself(tmp_path: Path) -> None:
    """``report A A/`` (or ``A`` and a link to it, as an overlapping shell glob gives):
    one line, exit 2, nothing written. It wrote a comparison of the run with itself,
    every change 'same', without a word."""
    run = write_demo_run(tmp_path / "a", seed=0, hit=0.5, name="a", trees=2, turns=2)
    (tmp_path / "link").symlink_to(run)
    for twice in (f"{run}/", str(tmp_path / "link")):
        res = CliRunner().invoke(app, ["report", str(run), twice, "-o", str(tmp_path / "r")])
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
        assert "given twice" in res.output and "a report compares distinct runs" in res.output
    assert not (tmp_path / "r").exists()


def test_a_warning_that_the_runs_differ_comes_before_the_changes_and_stands_out(
        three: list[Path], tmp_path: Path) -> None:
    """A comparison of two workloads: the eye lands on the coloured table and the
    headline ("88x lower"); the warning that the runs differ in their workload came after
    the headline, a plain paragraph like the prose around it. It now comes before the
    headline, in a box of its own in report.html and in bold in report.md."""
    import shutil

    runs = []
    for i, d in enumerate(three[1:]):
        copy = tmp_path / f"r{i}"
        shutil.copytree(d, copy)
        info = json.loads((copy / R.RUN_FILE).read_text())
        info["fingerprint"] = {"version": 1, "trace": f"t{i}", "time_base": "virtual"}
        (copy / R.RUN_FILE).write_text(json.dumps(info))
        runs.append(copy)
    res = CliRunner().invoke(app, ["report", *map(str, runs), "-o", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "a" / "report.html").read_text()
    warning = html.index('<p class="warning">Warning: the runs differ in trace')
    assert "p.warning{" in html
    assert warning < html.index(" vs ", html.index("<h2>Comparison"))
    md = (tmp_path / "a" / "report.md").read_text()
    assert md.index("**Warning:** the runs differ in trace") < md.index(" vs ", md.index(
        "## Comparison"))


def test_axis_ticks_of_thousands_are_written_with_separators() -> None:
    """A TTFT axis up to 100 s read 100000 (the tables write 100,000); fractional and log
    axes keep matplotlib's own ticks."""
    from agentbench.report import plots

    plt = plots.plt_module()
    fig, (big, small) = plt.subplots(1, 2)
    big.plot([1, 2, 3], [2_000, 50_000, 100_000])
    small.plot([0.1, 0.2], [0.5, 0.75])
    plots.thousands(fig)
    fig.canvas.draw()
    labels = [t.get_text().replace("\u2212", "-") for t in big.get_yticklabels()]
    assert "100,000" in labels and "20,000" in labels, labels
    assert not any(lab.isdigit() and len(lab) > 3 for lab in labels), labels
    assert any("." in t.get_text() for t in small.get_yticklabels())
    plt.close(fig)


def test_a_comparison_says_what_its_runs_scenarios_set_differently(tmp_path: Path) -> None:
    """``run --set endpoints.0.router=round_robin``, then ``report A B``: the comparison
    printed the reference's description ("session-affinity routing") above both runs and
    nowhere said that the other was routed round robin. It now names each key the runs'
    scenarios set differently, with each run's value, before the headline; runs of one
    scenario get no such line."""
    runs = []
    for name, router in (("a", "session_affinity"), ("b", "round_robin")):
        d = write_demo_run(tmp_path / name, seed=1, trees=2, turns=3, name="q")
        info = json.loads((d / R.RUN_FILE).read_text())
        info["scenario"]["endpoints"][0]["router"] = router
        (d / R.RUN_FILE).write_text(json.dumps(info))
        runs.append(d)
    res = CliRunner().invoke(app, ["report", *map(str, runs), "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r" / "report.md").read_text()
    a, b = (json.loads((d / R.RUN_FILE).read_text())["run_id"] for d in runs)
    said = (f"Set differently in the runs' scenarios: endpoints.0.router: "
            f"session_affinity ({a}), round_robin ({b}).")
    assert said in md and md.index(said) < md.index(f"{b} vs {a}:")
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Set differently in the runs&#x27; scenarios: endpoints.0.router:" in html
    same = [write_demo_run(tmp_path / n, seed=i, trees=2, turns=3, name="q")
            for i, n in enumerate("cd")]
    res = CliRunner().invoke(app, ["report", *map(str, same), "-o", str(tmp_path / "s")])
    assert res.exit_code == 0 and "Set differently" not in (tmp_path / "s" / "report.md"
                                                            ).read_text()
    # a run.json that names no scenario differs in every key: nothing is said of it
    info = json.loads((same[1] / R.RUN_FILE).read_text())
    del info["scenario"]
    (same[1] / R.RUN_FILE).write_text(json.dumps(info))
    res = CliRunner().invoke(app, ["report", *map(str, same), "-o", str(tmp_path / "n")])
    assert res.exit_code == 0 and "Set differently" not in (tmp_path / "n" / "report.md"
                                                            ).read_text()


def test_a_validity_warning_stands_out_as_every_warning_does() -> None:
    """Under rules, "warning: stage c=32 delivered 6.30 requests in flight ... for 32
    lanes" (the sweep's label far above its load) was a plain paragraph in the headline,
    its lowercase ``warning:`` missing the report's warning box: it is one now."""
    from agentbench.report.onerun import validity_lines
    from agentbench.report.page import Section, to_html, to_markdown

    line = ("stage c=32 delivered 6.30 requests in flight on average for 32 lanes (23 "
            "active; 20%): the agents' pauses leave the load far below its label")
    s = {"validity": {"rules": "agentx", "valid": True, "reasons": [],
                      "details": ["context_overflow: 0.0%", f"warning: {line}"]}}
    sec = [Section("Headline", text=validity_lines(s))]
    assert f'<p class="warning">Warning: {line}.</p>' in to_html("t", sec).replace(
        "&#x27;", "'")
    md = to_markdown("t", sec)
    assert f"**Warning:** {line}." in md and "context_overflow: 0.0%." in md


def test_a_comparison_warns_of_a_run_with_few_or_no_successful_requests(
        three: list[Path], tmp_path: Path) -> None:
    """A run whose every request failed, compared with a whole one: ``agentbench.compare``
    warned that its figures rest on 0 successful requests, the report of the same runs
    said nothing above its table (its self-hosted cost showed green, "1.5x lower"). The
    report's comparison now gives the same warnings, before the headline changes."""
    import agentbench

    failed = write_demo_run(tmp_path / "failed", trees=8, turns=20, fail_rate=1.0, seed=2,
                            hit=0.9, name="failed")
    few = write_demo_run(tmp_path / "few", trees=2, turns=3, seed=2, hit=0.9, name="few",
                         fail_rate=0.0)
    assert any("failed: no measured request succeeded" in w
               for w in agentbench.compare(three[1], failed, allow="all").warnings)
    for other, said in ((failed, "**Warning:** failed: no measured request succeeded"),
                        (few, "**Warning:** few: its figures rest on 6 successful measured "
                              "requests (under 30): rough at best")):
        out = tmp_path / f"rep-{other.name}"
        res = CliRunner().invoke(app, ["report", str(three[1]), str(other), "-o", str(out)])
        assert res.exit_code == 0, res.output
        md = (out / "report.md").read_text()
        comparison = md.split("## Comparison", 1)[1].split("\n## ", 1)[0]
        assert said in comparison, comparison
        assert comparison.index(said) < comparison.index(f"{other.name} vs "), comparison
