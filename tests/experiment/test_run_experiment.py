"""``agentbench.run_experiment`` (the library entry the CLI's ``run`` wraps) and the
executor seam: variants run, summarized, judged and compared as ``agentbench run`` does;
an executor passed in runs the lanes and gives the records the default one gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

import agentbench
from agentbench.replay.executor import InProcess
from agentbench.replay.runner import default_executor


def _scenario_file(folder: Path, variants: bool = True) -> Path:
    doc: dict[str, Any] = {
        "name": "exp", "seed": 3,
        "endpoints": [{"kind": "simulated", "name": "sim", "preset": "h100-llama3-8b",
                       "instances": 2}],
        "trace": {"kind": "synth", "profile": "agentx", "sessions": 3,
                  "transform": {"max_context_tokens": 20000}},
        "load": {"kind": "lanes", "concurrency": 2},
        "timing": {"time_scale": 0.1},
        "limits": {"max_sessions": 3, "recycle": False},
        "output": {"dir": str(folder / "results")},
    }
    if variants:
        doc["variants"] = [{"name": "rr", "set": {"endpoints.0.router": "round_robin"}},
                           {"name": "aff", "set": {"endpoints.0.router": "session_affinity"}}]
    f = folder / "exp.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


class _Told:
    def __init__(self) -> None:
        self.events: list[str] = []

    def variant_started(self, scenario: Any, of: int) -> None:
        self.events.append(f"start {scenario.name} of {of}")

    def run_started(self, run_dir: Path) -> None:
        self.events.append("folder")

    def trace_warning(self, line: str) -> None:
        self.events.append("warning")

    def variant_done(self, run: Any) -> None:
        self.events.append(f"done {run.scenario.name}")

    def compared(self, result: Any) -> None:
        self.events.append(f"compared {len(result.runs)}")


def test_run_experiment_runs_every_variant_and_compares(tmp_path: Path) -> None:
    told = _Told()
    x = agentbench.run_experiment(_scenario_file(tmp_path), listener=told)
    assert [r.scenario.name for r in x.runs] == ["exp-rr", "exp-aff"]
    assert told.events == ["start exp-rr of 2", "folder", "done exp-rr",
                           "start exp-aff of 2", "folder", "done exp-aff", "compared 2"]
    for r in x.runs:
        assert (r.run_dir / "requests.parquet").exists() and r.info["status"] == "completed"
        assert r.summary["overall"]["requests"]["ok"] > 0
        assert r.failure is None and r.invalid is None
    assert x.exit_code == 0 and x.failed == [] and len(x.comparison.headlines) == 1
    # the same scenario through the CLI gives the same records (virtual time)
    from typer.testing import CliRunner

    from agentbench.cli import app

    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["run", str(_scenario_file(tmp_path)), "-o", str(out)])
    assert res.exit_code == 0, res.output
    for r in x.runs:
        cli_dir = next(out.glob(r.scenario.name + "-*"))
        assert pq.read_table(cli_dir / "requests.parquet").equals(
            pq.read_table(r.run_dir / "requests.parquet"))


def test_an_executor_passed_in_runs_the_lanes(tmp_path: Path) -> None:
    """A factory wrapping the in-process executor sees every stage, and the run's records
    are those of the default executor."""
    stages: list[int] = []

    class Counting(InProcess):
        async def run_stage(self, k: int, stage: Any, start_ns: int) -> int | None:
            stages.append(k)
            return await super().run_stage(k, stage, start_ns)

    def factory(n_workers: int, run: Any) -> Any:
        base = default_executor(n_workers, run)
        assert isinstance(base, InProcess)
        return Counting(base.ctx, base.scenario, base.trace, base.source)

    f = _scenario_file(tmp_path, variants=False)
    mine = agentbench.run_experiment(f, executor=factory).runs[0]
    plain = agentbench.run_experiment(f).runs[0]
    assert stages == [0]
    assert pq.read_table(mine.run_dir / "requests.parquet").equals(
        pq.read_table(plain.run_dir / "requests.parquet"))
    assert mine.run_dir != plain.run_dir


def test_variants_share_one_hash_and_one_potential_of_their_trace(
        tmp_path: Path, monkeypatch: Any) -> None:
    """The trace read once for all variants is hashed once, and its potential cached tokens
    computed once; each variant's fingerprint and rows are what a trace of its own gives."""
    import json

    import agentbench.replay.runner as runner
    from agentbench.replay.runsetup import load_trace
    from agentbench.scenario.fingerprint import trace_hash
    from agentbench.scenario.loading import expand_variants, load_scenario
    from agentbench.traces import stats

    path = _scenario_file(tmp_path)
    made: list[object] = []
    real = stats.Potential

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, sessions: Any) -> None:
            made.append(self)
            super().__init__(sessions)

    monkeypatch.setattr(stats, "Potential", Counted)
    monkeypatch.setattr(runner, "Potential", Counted)  # a run that made its own counts too
    x = agentbench.run_experiment(path)
    assert len(x.runs) == 2 and len(made) == 1
    own = load_trace(expand_variants(load_scenario(path))[0])
    assert not own.memo
    fresh = real(own.sessions)
    for run in x.runs:
        info = json.loads((run.run_dir / "run.json").read_text())
        assert info["fingerprint"]["trace"] == trace_hash(own)
        rows = pq.read_table(run.run_dir / "requests.parquet").to_pylist()
        assert rows and all(r["potential_cached_tokens"] == fresh.get((r["session_id"],
                                                                       r["turn"]))
                            for r in rows)
    assert sum(r["potential_cached_tokens"] for r in rows) > 0


def test_variants_that_replay_different_traces_are_compared_within_their_trace(
        tmp_path: Path) -> None:
    """A sweep of two routers over two traces (``trace.profile`` set per variant, as
    ``pd-ratio.yaml`` does): each variant is compared with the first variant replaying
    its own trace, and the traces' first variants with each other; a change against
    another trace's variant is the workload's as much as the serving's."""
    f = _routers_over_traces(tmp_path, ["a-rr", "a-aff", "c-rr", "c-aff"])
    x = agentbench.run_experiment(f)
    assert [h.split(":")[0] for h in x.comparison.headlines] == [
        "a-aff vs a-rr", "c-rr vs a-rr", "c-aff vs a-rr"]  # the whole sweep, as before
    assert [[h.split(":")[0] for h in c.headlines] for c in x.by_trace] == [
        ["a-aff vs a-rr"], ["c-aff vs c-rr"]]
    assert [h.split(":")[0] for h in x.across_traces.headlines] == ["c-rr vs a-rr"]
    # each group's table names its runs as the headlines do (not ``rr``/``aff``, which
    # both groups would show)
    assert [list(c.values.columns) for c in x.by_trace] == [["a-rr", "a-aff"],
                                                            ["c-rr", "c-aff"]]
    assert list(x.by_trace[1].table.columns) == ["c-rr", "c-aff", "c-aff vs c-rr"]
    assert [[r.path.name for r in c.runs] for c in x.by_trace] == [
        [x.runs[0].run_dir.name, x.runs[1].run_dir.name],
        [x.runs[2].run_dir.name, x.runs[3].run_dir.name]]
    # the CLI prints those, and a report command for each trace's variants
    from typer.testing import CliRunner

    from agentbench.cli import app

    res = CliRunner().invoke(app, ["run", str(f), "-o", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    tail = res.stdout[res.stdout.index("\ncomparison"):].splitlines()[1:]
    assert [line.split(":")[0] for line in tail] == [
        "comparison (each variant against the first variant that replays the same trace)",
        "a-aff vs a-rr", "c-aff vs c-rr",
        "across traces (the first variant of each; the workloads differ)", "c-rr vs a-rr",
        "report", "report"]
    assert [line.count("exp-a-") for line in tail[-2:]] == [2, 0]
    assert [line.count("exp-c-") for line in tail[-2:]] == [0, 2]


def test_variants_of_one_trace_keep_one_comparison(tmp_path: Path) -> None:
    x = agentbench.run_experiment(_scenario_file(tmp_path))
    assert x.by_trace == [] and x.across_traces is None


@pytest.mark.parametrize(("kw", "says"), [
    ({"repeat": "2"}, "field 'repeat': expected a count of runs of each variant, got '2'"),
    ({"repeat": 2.5}, "field 'repeat': expected a count of runs of each variant, got 2.5"),
    ({"repeat": True}, "field 'repeat': expected a count of runs of each variant, got True"),
    ({"repeat": 0}, "field 'repeat': must be at least 1, not 0"),
    ({"repeat": 2, "ray": "local"}, "field 'repeat': must be 1 on a Ray cluster"),
    ({"workers": 2.5}, "field 'workers': expected a count of worker processes or 'auto', "
                       "got 2.5"),
    ({"workers": [2]}, "field 'workers': expected a count of worker processes"),
    ({"workers": 2, "ray": "local"}, "field 'workers': with ray, Ray's actors run the lanes"),
    ({"workers_per_node": "2"}, "field 'workers_per_node': expected a count of load "
                                "workers on each Ray node, got '2'"),
    ({"workers_per_node": 2}, "field 'workers_per_node': needs ray"),
    ({"ray": 5}, "field 'ray': expected a Ray address"),
    ({"progress": "no"}, "field 'progress': expected True, False or None, got 'no'"),
    ({"listener": 5}, "field 'listener': expected a Listener"),
    ({"scenario_path": 5}, "field 'scenario_path': expected the path of the scenario's file"),
    ({"traces": [1]}, "field 'traces': expected a dict"),
    ({"executor": 5}, "field 'executor': expected an executor factory"),
])
def test_a_bad_argument_is_one_error_naming_it(tmp_path: Path, kw: dict[str, Any],
                                               says: str) -> None:
    """``run_experiment(..., repeat="2")`` was a bare TypeError ('<' not supported), 2.5 a
    ValueError about a format code, ``ray=5`` an AttributeError; ``progress="no"`` drew
    a progress bar, ``workers=2.5`` ran 2 workers and ``workers_per_node`` without
    ``ray`` was dropped, each without a word. Each is one ``InputError`` naming the
    argument, before anything runs (no folder made)."""
    from agentbench.errors import InputError

    f = _scenario_file(tmp_path, variants=False)
    with pytest.raises(InputError) as e:
        agentbench.run_experiment(f, **kw)
    assert says in e.value.one_line()
    assert not (tmp_path / "results").exists()


def test_a_scenario_that_is_neither_is_one_error() -> None:
    from agentbench.errors import InputError

    with pytest.raises(InputError, match="field 'scenario': expected a Scenario or the path "
                       "of its YAML file, got 5"):
        agentbench.run_experiment(5)


def test_the_command_names_its_option_where_the_library_names_its_argument(
        tmp_path: Path) -> None:
    """``agentbench run --repeat 2 --ray local`` and ``--workers abc``: the error of
    ``run_experiment``'s argument names the option typed (``--workers``, not
    ``workers``), one line, exit 2, nothing run."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    f = _scenario_file(tmp_path, variants=False)
    for args, says in ((["--repeat", "2", "--ray", "local"],
                        "field '--repeat': must be 1 on a Ray cluster"),
                       (["--workers", "abc"], "field '--workers': workers must be a "
                                              "positive integer or 'auto', not 'abc'")):
        res = CliRunner().invoke(app, ["run", str(f), *args])
        assert res.exit_code == 2 and res.output == f"error: {says}\n", res.output
    assert not (tmp_path / "results").exists()


def _routers_over_traces(tmp_path: Path, names: list[str],
                         limits: dict[str, object] | None = None) -> Path:
    """A scenario file whose variants are ``names``: ``a-`` the scenario's trace, ``c-``
    Codex-profile agents (``trace.profile``, as ``pd-ratio.yaml`` sets it per variant),
    ``-rr`` round-robin routing, ``-aff`` session affinity; ``limits`` replaces the
    scenario's."""
    f = _scenario_file(tmp_path, variants=False)
    doc = yaml.safe_load(f.read_text())
    routers = {"rr": "round_robin", "aff": "session_affinity"}
    doc["variants"] = [
        {"name": n, "set": {"endpoints.0.router": routers[n.split("-")[1]],
                            **({"trace.profile": "codex"} if n.startswith("c-") else {})}}
        for n in names]
    if limits is not None:
        doc["limits"] = limits
    f.write_text(yaml.safe_dump(doc))
    return f


def _two_traces(tmp_path: Path) -> Path:
    """Three variants over two traces (``c-rr`` alone on its own), each on 12 requests."""
    return _routers_over_traces(tmp_path, ["a-rr", "a-aff", "c-rr"],
                                {"max_requests": 12, "recycle": False})


def test_a_sweep_over_traces_prints_a_report_of_every_run(tmp_path: Path) -> None:
    """The report lines named each shared trace's first runs only: a trace one variant
    replays (``c-rr``) had none, and the repeats were left out."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    res = CliRunner().invoke(app, ["run", str(_two_traces(tmp_path)), "-o",
                                   str(tmp_path / "cli"), "--repeat", "2"])
    assert res.exit_code == 0, res.output
    reports = [line for line in res.stdout.splitlines() if line.startswith("report: ")]
    assert [[line.count(f"exp-{v}-rep") for v in ("a-rr", "a-aff", "c-rr")]
            for line in reports] == [[2, 2, 0], [0, 0, 2]], reports
