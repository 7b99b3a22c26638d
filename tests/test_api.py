"""The Python API (load, compare) and the example notebook, executed against a results
folder the test writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentbench
from agentbench.results import schema as R
from agentbench.testing.demo import write_demo_run
from tests.helpers import ROOT


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


def test_the_lazy_names_are_listed_and_given() -> None:
    """``dir(agentbench)`` offers what the API gives (tab completion in a notebook), and
    each name is there, the classes ``load`` and ``compare`` return included."""
    from agentbench.metrics.run import Run
    from agentbench.report.comparison import Comparison

    assert {"load", "compare", "run_experiment", "Run", "Comparison"} <= set(dir(agentbench))
    assert agentbench.Run is Run and agentbench.Comparison is Comparison
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        agentbench.nothing  # noqa: B018


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
    assert r.requests.attrs["time_base"] == r.time_base.kind and r.time_base.factor == 1.0
    m = r.requests[(r.requests.phase == "measure") & (r.requests.status == "ok")]
    assert m["ttft_ms"].median() == pytest.approx(r.summary["overall"]["latency"]["ttft_ms"]["p50"])
    # a second load reads summary.json instead of recomputing it
    mtime = (run_dir / R.SUMMARY_FILE).stat().st_mtime_ns
    assert agentbench.load(run_dir).summary == r.summary
    assert (run_dir / R.SUMMARY_FILE).stat().st_mtime_ns == mtime
    # the repr: the P50 TTFT to 0.1 ms (not six decimals), and which clock it is on
    p50 = r.summary["overall"]["latency"]["ttft_ms"]["p50"]
    clock = ", simulated time" if r.time_base.kind in ("virtual", "simulated") else ""
    assert repr(r) == (f"Run({r.name!r}, requests={r.summary['overall']['requests']['total']},"
                       f" ttft_p50_ms={round(p50, 1)}{clock})")


def test_compare(run_dir: Path, tmp_path: Path) -> None:
    other = write_demo_run(tmp_path / "slow", trees=6, turns=12, concurrency=(2,), seed=4,
                           ttft_scale=2.0)
    c = agentbench.compare(agentbench.load(run_dir), other)
    assert list(c.table.columns) == ["demo", "slow", "slow vs demo"]
    assert c.table.loc["P50 TTFT", "slow vs demo"] == "2.0x higher"
    # the numbers beside the view: floats, one row per metric, one column per run
    assert list(c.values.columns) == ["demo", "slow"] == list(c.ratios.columns)
    assert all(str(t) == "float64" for t in c.values.dtypes)
    ttft = [r.summary["overall"]["latency"]["ttft_ms"]["p50"] for r in c.runs]
    assert c.values.loc["ttft_p50"].tolist() == pytest.approx(ttft)
    assert c.ratios.loc["ttft_p50", "slow"] == pytest.approx(ttft[1] / ttft[0])
    assert c.ratios["demo"].dropna().eq(1.0).all()
    assert {"hit_rate_potential", "achieved_over_potential", "input_throughput_per_gpu",
            "output_throughput_per_gpu", "cost_per_agent"} <= set(c.values.index)
    assert c.values.attrs["labels"]["ttft_p50"] == "P50 TTFT"
    assert c.headlines[0].startswith("slow vs demo: throughput")
    assert "P50 TTFT 2.0x higher" in c.headlines[0]
    assert "<table" in c._repr_html_()
    with pytest.raises(ValueError):
        agentbench.compare(run_dir)


def test_compare_names_the_runs_as_told(run_dir: Path, tmp_path: Path) -> None:
    """``labels=`` names the runs in the table, the numbers, the headlines and the
    warnings (a sweep's group comparison names its runs as the whole sweep does); labels
    that are not one distinct, non-empty name a run are refused before anything is read
    as figures."""
    other = write_demo_run(tmp_path / "slow", trees=6, turns=12, concurrency=(2,), seed=4,
                           ttft_scale=2.0)
    c = agentbench.compare(run_dir, other, labels=["base", "twice-slow"])
    assert list(c.table.columns) == ["base", "twice-slow", "twice-slow vs base"]
    assert list(c.values.columns) == ["base", "twice-slow"] == list(c.ratios.columns)
    assert c.headlines[0].startswith("twice-slow vs base: ")
    assert c.table.loc["P50 TTFT", "twice-slow vs base"] == "2.0x higher"
    same = agentbench.compare(run_dir, run_dir, labels=("one", "two")).warnings
    assert [w.split(" are ")[0] for w in same if "same run folder" in w] == ["one and two"]
    for bad in (["a"], ["a", "a"], ["a", ""], "ab", ["a", "b", "c"], ["a", 2]):
        with pytest.raises(ValueError, match="labels"):
            agentbench.compare(run_dir, other, labels=bad)  # type: ignore[arg-type]


def test_labels_that_are_the_tables_own_column_names_are_kept_apart(
        run_dir: Path, tmp_path: Path) -> None:
    """The formatted table's columns are the runs' names, their changes (``b vs a``) and,
    as its index, ``metric``: a run named ``metric`` replaced each row's metric label
    with its own value, a run named ``b vs a`` lost its column to that change, and a
    blank name showed nothing. The first is kept apart now; the others are refused."""
    other = write_demo_run(tmp_path / "slow", trees=6, turns=12, concurrency=(2,), seed=4,
                           ttft_scale=2.0)
    c = agentbench.compare(run_dir, other, labels=["metric", "b"])
    assert list(c.table.columns) == ["metric", "b", "b vs metric"]
    assert "P50 TTFT" in c.table.index and c.table.index.name == "metric"
    for bad in (["a", "b", "b vs a"], [" ", "b", "c"], ["a", "\n", "c"]):
        with pytest.raises(ValueError, match="labels"):
            agentbench.compare(run_dir, other, other, labels=bad)


def test_a_run_compared_with_itself_says_so(run_dir: Path, tmp_path: Path) -> None:
    """``compare(r, r)`` (the notebook's table shape), a folder and the run loaded from it,
    or a link to it: still a comparison, every change zero, but it said nothing of being
    one run twice. Now one warning names the folder, in ``str`` and the notebook's view."""
    r = agentbench.load(run_dir)
    (tmp_path / "link").symlink_to(run_dir)
    for other in (r, run_dir, tmp_path / "link"):
        c = agentbench.compare(r, other)
        same = [w for w in c.warnings if "the same run folder" in w]
        assert len(same) == 1 and f"({run_dir})" in same[0], c.warnings
        assert "every change is zero" in same[0]
        assert f"warning: {same[0]}" in str(c)
        assert "the same run folder" in c._repr_html_()
    other = write_demo_run(tmp_path / "slow", trees=6, turns=12, concurrency=(2,), seed=4,
                           ttft_scale=2.0)
    assert not [w for w in agentbench.compare(r, other).warnings if "same run" in w]


def test_a_run_compared_with_a_copy_of_its_folder_says_so(tmp_path: Path) -> None:
    """A folder copied (a baseline saved by ``cp -r``) holds the same run: its run.json's
    id, start time, process and host. Compared with the original, every change is zero,
    and only a folder or a link to it was told; a copy is now too, in ``compare`` and in
    the gate. A deterministic re-run (another start) is not one."""
    import shutil

    from agentbench.replay import run
    from agentbench.report.gate import evaluate
    from agentbench.report.gaterules import parse_rules
    from agentbench.scenario.loading import load_scenario

    dirs = []
    for rid in ("a", "b"):
        sc = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
        sc.output.dir, sc.output.run_id = str(tmp_path), rid
        dirs.append(run(sc, progress=False).run_dir)
    copy = tmp_path / "copy"
    shutil.copytree(dirs[0], copy)
    warned = [w for w in agentbench.compare(dirs[0], copy).warnings if "copies" in w]
    assert len(warned) == 1 and str(copy) in warned[0] and "every change is zero" in warned[0]
    rules, opts = parse_rules({"ttft_p50": {"max_increase": "10%"}})
    said = [w for w in evaluate(dirs[0], copy, rules, opts).warnings
            if "copies of one run" in w]
    assert len(said) == 1 and said[0].startswith("baseline and candidate are copies")
    assert not [w for w in agentbench.compare(dirs[0], dirs[1]).warnings if "copies" in w]
    assert not [w for w in evaluate(dirs[0], dirs[1], rules, opts).warnings
                if "copies" in w]
    # among several baselines a copy is the run given twice: refused, not a re-run with
    # no spread (which made every rule's bound its point)
    from typer.testing import CliRunner

    from agentbench.cli import app

    res = CliRunner().invoke(app, ["gate", str(dirs[0]), str(copy), str(dirs[1])])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert f"given twice (a copy of {str(dirs[0])!r}: run id a)" in res.output


def test_requests_in_one_time_base(tmp_path: Path) -> None:
    """A simulator at speedup 10 over HTTP: the stamps are wall time, the summary's
    durations simulated (x 10); load().requests puts both in simulated time."""
    import json

    d = write_demo_run(tmp_path / "fast", trees=4, turns=6, concurrency=(2,), seed=1)
    run = json.loads((d / R.RUN_FILE).read_text())
    run["scenario"]["endpoints"][0]["speedup"] = 10
    run["scenario"].setdefault("timing", {})["time_scale"] = 0.1
    (d / R.RUN_FILE).write_text(json.dumps(run))
    r = agentbench.load(d, refresh=True)
    assert r.time_base.kind == "simulated" and r.time_base.factor == 10
    q = r.requests
    assert q.attrs["time_base"] == "simulated"
    raw = r.records.requests
    assert (q["sent_ns"] == raw["sent_ns"] * 10).all()
    ok = q[q["first_token_ns"].notna()]
    # TTFT = (first_token_ns - sent_ns) / 1e6, both sides in the same (simulated) base
    assert ok["ttft_ms"].to_numpy() == pytest.approx(
        ((ok["first_token_ns"] - ok["sent_ns"]) / 1e6).to_numpy(), rel=1e-6)
    assert ok["e2e_ms"].to_numpy() == pytest.approx(
        ((ok["end_ns"] - ok["sent_ns"]) / 1e6).to_numpy(), rel=1e-6)
    m = q[(q.phase == "measure") & (q.status == "ok")]
    assert m["ttft_ms"].median() == pytest.approx(r.summary["overall"]["latency"]["ttft_ms"]["p50"])
    s = r.sessions
    assert s.attrs["time_base"] == "simulated"
    assert (s["start_ns"].dropna() == r.records.sessions["start_ns"].dropna() * 10).all()


def test_a_run_without_sessions_parquet_says_so(tmp_path: Path) -> None:
    """Every run writes sessions.parquet; without it load read an empty table and the
    agents' figures fell back to their requests without a word. Now the summary warns (the
    terminal summary and the report show it), also where summary.json was written while
    the file was there; a complete run has no such warning."""
    from agentbench.metrics import format_summary
    from agentbench.metrics.summary import NO_SESSIONS

    d = write_demo_run(tmp_path / "r", trees=3, turns=3, concurrency=(2,), seed=2)
    whole = agentbench.load(d)
    assert len(whole.sessions) > 0 and NO_SESSIONS not in whole.summary["time_base"]["warnings"]
    (d / R.SESSIONS_FILE).unlink()  # summary.json, made with it, is still there
    r = agentbench.load(d)
    assert len(r.sessions) == 0 and NO_SESSIONS in r.summary["time_base"]["warnings"]
    assert f"warning       {NO_SESSIONS}" in format_summary(r.summary)
    assert r.summary["overall"]["requests"] == whole.summary["overall"]["requests"]
    # report says it on the terminal too, naming the run
    from typer.testing import CliRunner

    from agentbench.cli import app

    res = CliRunner().invoke(app, ["report", str(d), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0 and f"warning: {r.name}: {NO_SESSIONS}" in res.output, res.output


@pytest.mark.timeout(240)
def test_notebook_executes(run_dir: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(ROOT / "examples" / "analysis.ipynb", as_version=4)
    old = os.environ.get("AGENTBENCH_RUN")
    os.environ["AGENTBENCH_RUN"] = str(run_dir)
    try:
        # from the repository root, as `jupyter execute examples/analysis.ipynb` runs it
        nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT)}}).execute()
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


def test_notebook_finds_the_newest_run_from_the_root_or_from_examples(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RUN, the notebook's first cell takes the newest results/<run>/ of the working
    folder or of the nearest folder above it (the repository root seen from examples/)."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(ROOT / "examples" / "analysis.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "find-run" in c.metadata.get("tags", []))
    for run in ("old", "new"):
        (tmp_path / "results" / run).mkdir(parents=True)
        (tmp_path / "results" / run / "requests.parquet").write_bytes(b"")
        os.utime(tmp_path / "results" / run / "requests.parquet",
                 (1, 1 if run == "old" else 2))
    (tmp_path / "examples").mkdir()
    monkeypatch.delenv("AGENTBENCH_RUN", raising=False)
    for cwd in (tmp_path, tmp_path / "examples"):
        monkeypatch.chdir(cwd)
        ns: dict[str, object] = {}
        exec(cell.source, ns)
        assert ns["run_dir"] == tmp_path.resolve() / "results" / "new"
    monkeypatch.setenv("AGENTBENCH_RUN", str(tmp_path / "results" / "old"))
    ns = {}
    exec(cell.source, ns)
    assert ns["run_dir"] == tmp_path / "results" / "old"


def test_compare_refuses_runs_that_replayed_different_things(tmp_path: Path) -> None:
    """Same trace, another load: compare names the field; allowed, it compares."""
    from agentbench.errors import InputError
    from agentbench.replay import run
    from agentbench.scenario.model import Scenario

    def sc(lanes: int, rid: str) -> Scenario:
        return Scenario.model_validate({
            "name": "fp", "endpoints": [{"kind": "simulated", "instances": 1}],
            "trace": {"kind": "synth", "profile": "codex", "sessions": 2,
                      "transform": {"scale": 0.05}},
            "load": {"kind": "lanes", "concurrency": lanes},
            "limits": {"recycle": False, "max_requests": 6},
            "output": {"dir": str(tmp_path), "run_id": rid}})

    a, b, c = (run(sc(n, rid), progress=False).run_dir
               for n, rid in ((1, "a"), (1, "b"), (2, "c")))
    # comparable; but 6 requests a run are too few for more than rough figures, and it says so
    warned = agentbench.compare(a, b).warnings
    assert len(warned) == 2 and all("rest on 6 successful measured requests" in w
                                    for w in warned)
    with pytest.raises(InputError, match=r"load"):
        agentbench.compare(a, c)
    assert agentbench.compare(a, c, allow=["load"]).values.shape[1] == 2
    # as the docs write it: a string (once read letter by letter: "unknown field 'l'")
    assert agentbench.compare(a, c, allow="load").values.shape[1] == 2
    assert agentbench.compare(a, c, allow="all").values.shape[1] == 2
    assert agentbench.compare(a, c, allow="trace,load").values.shape[1] == 2
    with pytest.raises(InputError, match="unknown field 'lode'"):
        agentbench.compare(a, c, allow="lode")


@pytest.mark.parametrize(("kw", "says"), [
    ({"block": "nosuch"}, "field 'block': no block 'nosuch' in its summary (blocks: overall)"),
    ({"allow": [5]}, "allow: expected field names (strings), got 5"),
    ({"allow": "nope"}, "allow: unknown field 'nope'"),
])
def test_compare_says_what_is_wrong_with_its_arguments(run_dir: Path, kw: dict,
                                                       says: str) -> None:
    """A bare ``KeyError`` for an unknown block, an ``AttributeError`` for ``allow=[5]``,
    and "--allow" named to a Python caller: each is now one ``InputError`` line."""
    from agentbench.errors import InputError

    with pytest.raises(InputError) as e:
        agentbench.compare(run_dir, run_dir, **kw)
    assert says in e.value.one_line()


def _edited_by_hand(d: Path, table: str, column: str, bad: object) -> None:
    """``table`` of run ``d`` with ``bad`` in ``column`` (its last row, or every row for a
    number), and summary.json gone, as a hand edit leaves them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(d / table)
    values = t.column(column).to_pylist()
    values[-1] = bad
    t = t.set_column(t.schema.get_field_index(column), column,
                     pa.array(values if isinstance(bad, str) else [bad] * len(values)))
    pq.write_table(t, d / table)
    (d / R.SUMMARY_FILE).unlink(missing_ok=True)


def _refused_in_one_line(d: Path, table: str, column: str, bad: object,
                         out: Path) -> None:
    """load refuses ``d`` naming the column, the value and the table; report in one line."""
    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.errors import InputError

    with pytest.raises(InputError, match=f"value '{bad}', expected one of") as e:
        agentbench.load(d)
    assert e.value.field == column and e.value.source == str(d / table)
    res = CliRunner().invoke(app, ["report", str(d), "-o", str(out)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output


@pytest.mark.parametrize(("column", "bad"), [("status", 1), ("status", "OK"),
                                             ("phase", "measured")])
def test_a_status_or_phase_no_run_writes_is_one_line(tmp_path: Path, column: str,
                                                     bad: object) -> None:
    """A requests.parquet edited by hand whose status held numbers (cast to text, '1')
    read as a run where nothing succeeded, without a word: load, report and gate say which
    column and value, one line."""
    d = write_demo_run(tmp_path / "r", trees=2, turns=2, concurrency=(1,), seed=2)
    assert agentbench.load(d).summary["overall"]["requests"]["ok"] > 0
    _edited_by_hand(d, R.REQUESTS_FILE, column, bad)
    _refused_in_one_line(d, R.REQUESTS_FILE, column, bad, tmp_path / "rep")


@pytest.mark.parametrize(("column", "bad"), [("status", 1), ("status", "completed"),
                                             ("phase", "Measure")])
def test_a_session_status_or_phase_no_run_writes_is_one_line(tmp_path: Path, column: str,
                                                             bad: object) -> None:
    """sessions.parquet edited by hand: a number in status read as agents that never
    completed (all 'cut'), a phase spelled otherwise as a run without root sessions, both
    without a word, as requests.parquet's did. One line naming the column and value."""
    d = write_demo_run(tmp_path / "r", trees=2, turns=2, concurrency=(1,), seed=2)
    assert agentbench.load(d).summary["overall"]["agents"]["completed"] > 0
    _edited_by_hand(d, R.SESSIONS_FILE, column, bad)
    _refused_in_one_line(d, R.SESSIONS_FILE, column, bad, tmp_path / "rep")


@pytest.mark.parametrize(("edit", "field"), [
    ({"ray": "x"}, "ray"),
    ({"ray": {"workers": [{}]}}, "ray.workers.0.worker"),
    ({"ray": {"workers": [{"worker": 0, "hostname": "h", "node": "n"}],
              "lost": [{"worker": "z"}]}}, "ray.lost.0.worker"),
    ({"stages": [{"label": "c=1", "start_ns": 0, "end_ns": 1, "lanes": "x"}]},
     "stages.0.lanes"),
    ({"stages": [{"label": "c=1", "start_ns": 0, "end_ns": "x"}]}, "stages.0.end_ns"),
    ({"rules": {"name": "agentx", "observed_share": "x"}}, "rules.observed_share"),
    ({"scenario.limits": "x"}, "scenario.limits"),
    ({"scenario.endpoints.0.speedup": 0}, "scenario.endpoints.0.speedup"),
    ({"scenario.endpoints.0.speedup": -2}, "scenario.endpoints.0.speedup"),
    ({"scenario.endpoints.0.speedup": float("nan")}, "scenario.endpoints.0.speedup"),
    ({"idle_pulled_in_ns": "x"}, "idle_pulled_in_ns"),
    ({"status": [1]}, "status"),
    ({"endpoints": [{"modeled_gpus": -3}]}, "endpoints.0.modeled_gpus"),
    # anything but "virtual" read as a wall-clock run: a virtual run's figures as simulated
    # at speedup 1, gated by a bootstrap where they are exact, without a word
    ({"time_base": 5}, "time_base"),
    ({"time_base": "Virtual"}, "time_base"),
])
def test_a_run_json_part_of_another_type_is_one_line(tmp_path: Path, edit: dict[str, object],
                                                     field: str) -> None:
    """run.json edited by hand where the figures read it: a ray section, a stage, the rules,
    the limits or a simulated speedup of another type was a traceback from load, report and
    gate (AttributeError, KeyError, ZeroDivisionError), and a speedup of -2 or NaN gave
    negative figures, or figures at speedup 1, without a word. One line naming the key."""
    import json

    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.errors import InputError

    base = write_demo_run(tmp_path / "base", trees=2, turns=2, concurrency=(1,), seed=2)
    d = write_demo_run(tmp_path / "r", trees=2, turns=2, concurrency=(1,), seed=2)
    run = json.loads((d / R.RUN_FILE).read_text())
    for path, value in edit.items():
        *up, last = path.split(".")
        node = run
        for k in up:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[int(last) if isinstance(node, list) else last] = value
    (d / R.RUN_FILE).write_text(json.dumps(run))  # NaN as NaN, as a hand edit leaves it
    (d / R.SUMMARY_FILE).unlink(missing_ok=True)
    with pytest.raises(InputError) as e:
        agentbench.load(d)
    assert e.value.field == field and e.value.source == str(d / R.RUN_FILE), e.value
    for args in (["report", str(d), "-o", str(tmp_path / "rep")], ["gate", str(base), str(d)]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
        assert field in res.output


def test_a_folder_that_is_no_run_is_named_so(run_dir: Path, tmp_path: Path) -> None:
    """``load`` and ``report`` of a folder without run.json or requests.parquet said
    "requests.parquet: file not found" (of ``.``, no folder at all), where ``gate`` and
    ``recover`` say it is no run folder; the folder of runs (``results``) names its runs."""
    import shutil

    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.errors import InputError

    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError) as e:
        agentbench.load(tmp_path / "empty")
    assert e.value.one_line() == (f"{tmp_path / 'empty'}: no run.json nor requests.parquet: "
                                  "not a run folder agentbench wrote")
    shutil.copytree(run_dir, tmp_path / "results" / "a-run")
    (tmp_path / "results" / "other").mkdir()
    with pytest.raises(InputError, match=r"results: .*not a run folder agentbench wrote "
                       r"\(it holds runs: a-run; give one\)$"):
        agentbench.load(str(tmp_path / "results"))
    res = CliRunner().invoke(app, ["report", str(tmp_path / "results"), "-o",
                                   str(tmp_path / "rep")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "it holds runs: a-run" in res.output


def test_gate_and_recover_of_a_folder_of_runs_name_its_runs(run_dir: Path,
                                                             tmp_path: Path) -> None:
    """``recover results`` and ``gate results RUN`` (the folder above the runs, as
    ``load`` and ``report`` now say) named no run to give instead: each names them."""
    import shutil

    from typer.testing import CliRunner

    from agentbench.cli import app

    for name in ("b-run", "a-run"):
        shutil.copytree(run_dir, tmp_path / "results" / name)
    for args in (["recover", str(tmp_path / "results")],
                 ["gate", str(tmp_path / "results"), str(tmp_path / "results" / "a-run"),
                  "--markdown", str(tmp_path / "g.md")]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
        assert res.output.strip().endswith("not a run folder agentbench wrote (it holds "
                                           "runs: a-run, b-run; give one)"), res.output


@pytest.mark.parametrize(("column", "shift"), [("sent_ns", 10**12), ("end_ns", -10**12),
                                               ("first_token_ns", -10**12)])
def test_request_times_out_of_order_are_one_line(tmp_path: Path, column: str,
                                                 shift: int) -> None:
    """A requests.parquet edited by hand whose row was sent after it ended (or got its
    first token before it was sent): load gave a TTFT or E2E of -999,523 ms without a
    word, report a numpy traceback. One line naming the row and the column."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.errors import InputError

    d = write_demo_run(tmp_path / "r", trees=2, turns=2, concurrency=(1,), seed=2)
    t = pq.read_table(d / R.REQUESTS_FILE)
    ok = pc.equal(t.column("status"), "ok").to_pylist()
    row = ok.index(True)
    values = t.column(column).to_pylist()
    values[row] += shift
    t = t.set_column(t.schema.get_field_index(column), column,
                     pa.array(values, t.schema.field(column).type))
    pq.write_table(t, d / R.REQUESTS_FILE)
    (d / R.SUMMARY_FILE).unlink(missing_ok=True)
    with pytest.raises(InputError, match="a request is sent, gets its first") as e:
        agentbench.load(d)
    assert e.value.where == f"row {row}" and e.value.source == str(d / R.REQUESTS_FILE)
    res = CliRunner().invoke(app, ["report", str(d), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output


@pytest.mark.parametrize(("column", "says"), [("token_event_ns", "out of order"),
                                              ("token_event_tokens", "negative")])
def test_token_events_out_of_order_or_negative_are_one_line(tmp_path: Path, column: str,
                                                            says: str) -> None:
    """A row's token events reversed, or a count of -7, moved the ITL percentiles without
    a word: one line naming the row and the column."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.errors import InputError

    d = write_demo_run(tmp_path / "r", trees=2, turns=2, concurrency=(1,), seed=2)
    t = pq.read_table(d / R.REQUESTS_FILE)
    values = t.column(column).to_pylist()
    row = next(i for i, v in enumerate(values) if v and len(v) > 1 and len(set(v)) > 1)
    values[row] = values[row][::-1] if column == "token_event_ns" else [-7] * len(values[row])
    t = t.set_column(t.schema.get_field_index(column), column,
                     pa.array(values, t.schema.field(column).type))
    pq.write_table(t, d / R.REQUESTS_FILE)
    (d / R.SUMMARY_FILE).unlink(missing_ok=True)
    with pytest.raises(InputError, match=says) as e:
        agentbench.load(d)
    assert e.value.where == f"row {row}" and e.value.field == column
    res = CliRunner().invoke(app, ["report", str(d), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
