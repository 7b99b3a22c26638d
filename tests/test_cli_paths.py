"""Paths and names as a careless shell gives them: ``''`` (an unset variable) is never the
working folder, a trace named ``.jsonl`` is never parquet, a header name with a space is
refused before anything starts, and a run.json without its scenario says that its GPU
count is assumed."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.cli.app import path_value
from agentbench.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def _commands(t: typer.Typer, prefix: tuple[str, ...] = ()):
    for c in t.registered_commands:
        yield (*prefix, c.name or c.callback.__name__), c.callback
    for g in t.registered_groups:
        yield from _commands(g.typer_instance, (*prefix, g.name))


def _path_params() -> list[tuple[tuple[str, ...], str, object]]:
    out = []
    for name, fn in _commands(app):
        for p in inspect.signature(fn).parameters.values():
            if p.annotation in ("Path", "Path | None", "list[Path]"):
                out.append((name, p.name, p.default))
    return out


def test_every_path_parameter_of_the_command_line_refuses_an_empty_name() -> None:
    """A path parameter added later without ``parser=path_value`` fails here."""
    params = _path_params()
    assert len(params) >= 19  # report, gate, recover, run, search, sim, traces, record
    missing = [(n, p) for n, p, d in params if getattr(d, "parser", None) is not path_value]
    assert missing == []


@pytest.mark.parametrize(("args", "field"), [
    (["report", ""], "RUNS"), (["report", "a", "-o", ""], "--output"),
    (["recover", ""], "RUNS"), (["gate", "a", ""], "RUNS"),
    (["gate", "a", "b", "--rules", ""], "--rules"), (["run", ""], "SCENARIO"),
    (["run", "x.yaml", "-o", ""], "--output"), (["validate", ""], "SCENARIO"),
    (["traces", "convert", "builtin:x", "-o", ""], "--output"),
    (["traces", "synth", "-p", "codex", "-n", "1", "-o", ""], "--output"),
    (["sim", "fit", "-o", ""], "--out"),
    (["record", "-o", "", "--upstream", "http://127.0.0.1:9"], "--output"),
])
def test_an_empty_path_is_one_line_before_anything_runs(tmp_path: Path, args: list[str],
                                                        field: str,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.output.strip() == (f"error: field '{field}': empty: give a path (. for the "
                                "working folder)"), r.output
    assert list(tmp_path.iterdir()) == []  # nothing written in the working folder


def test_load_of_an_empty_or_too_long_name_is_one_line(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import agentbench

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="an empty path: give a results folder"):
        agentbench.load("")
    with pytest.raises(InputError, match=r"cannot read it \(File name too long\)"):
        agentbench.load("a" * 300)  # was a raw OSError from the summary's stat
    with pytest.raises(InputError, match="results folder not found"):
        agentbench.load(tmp_path / "nothing")


@pytest.mark.parametrize("command", [["report"], ["recover"], ["gate", "BASE"], ["load"]])
def test_a_loop_of_symbolic_links_as_a_run_folder_is_named_so(tmp_path: Path,
                                                              command: list[str]) -> None:
    """A run folder that is a loop of links (``a -> b -> a``) is there, as links: it read
    "results folder not found", as for a mistyped name; it is named as the trace readers
    name one."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    loop = str(tmp_path / "a")
    if command == ["load"]:
        import agentbench

        with pytest.raises(InputError, match="a loop of symbolic links"):
            agentbench.load(loop)
        return
    args = [loop if a == "BASE" else a for a in command] + [loop]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.output.strip() == f"error: {loop}: a loop of symbolic links", r.output


@pytest.mark.parametrize(("name", "use"), [
    ("t.jsonl", "t.parquet"), ("t.JSON", "t.parquet"), ("t.csv", "t.parquet"),
    ("sub/t.jsonl.gz", "t.parquet"), ("t.parquet.gz", "t.parquet")])
def test_a_trace_named_for_another_format_is_refused(tmp_path: Path, name: str,
                                                     use: str) -> None:
    """``traces convert -o x.jsonl`` wrote parquet under that name."""
    out = tmp_path / name
    for args in (["traces", "convert", "builtin:claude-code-weka", "-o", str(out)],
                 ["traces", "synth", "-p", "codex", "-n", "1", "-o", str(out)],
                 ["record", "-o", str(out), "--upstream", "http://127.0.0.1:9"]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, r.output
        assert "written as native parquet, not" in r.output
        assert f"name it {use}" in r.output
        assert not out.exists()


def test_a_recording_made_under_another_name_can_still_be_rebuilt(tmp_path: Path) -> None:
    """``record --rebuild`` keeps the name the recording was made with (``.jsonl`` was
    allowed then): the name is not refused, its journal is what it reads."""
    r = CliRunner().invoke(app, ["record", "--rebuild", "-o", str(tmp_path / "calls.jsonl")])
    assert r.exit_code == 2 and "native parquet" not in r.output, r.output
    ok = tmp_path / "t.parquet"
    r = CliRunner().invoke(app, ["traces", "synth", "-p", "codex", "-n", "1", "-o", str(ok)])
    assert r.exit_code == 0 and ok.read_bytes()[:4] == b"PAR1", r.output


@pytest.mark.parametrize("header", ["a b", "X-Session:", "", "Ses\u00e9sion"])
def test_record_refuses_a_session_header_that_is_no_header_name(tmp_path: Path,
                                                                 header: str) -> None:
    r = CliRunner().invoke(app, ["record", "-o", str(tmp_path / "t.parquet"), "--upstream",
                                 "http://127.0.0.1:9", "--listen", "127.0.0.1:0",
                                 "--session-header", header])
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith("error: field 'session_header': not an HTTP header name")
    assert list(tmp_path.iterdir()) == []


def test_a_run_json_without_its_scenario_says_its_gpu_count_is_assumed(tmp_path: Path
                                                                       ) -> None:
    """``{}`` as run.json read "hardware.gpus as the scenario states"; nothing stated it."""
    import agentbench
    from agentbench.metrics import format_summary
    from agentbench.metrics.format import NO_SCENARIO_GPUS
    from agentbench.scenario.loading import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    sc.output.dir = str(tmp_path / "r")
    x = agentbench.run_experiment(sc)
    run_dir = x.runs[0].run_dir
    assert "assumed" not in x.runs[0].summary["run"]["gpus_source"]
    (run_dir / "run.json").write_text("{}")
    (run_dir / "summary.json").unlink()
    s = agentbench.load(run_dir).summary
    assert s["run"]["gpus"] == 1 and s["run"]["gpus_source"] == NO_SCENARIO_GPUS
    assert f"warning       per-GPU figures count 1 GPU, {NO_SCENARIO_GPUS}" in format_summary(s)
    json.dumps(s)


def test_report_refuses_a_folder_where_its_file_goes_before_making_anything(
        tmp_path: Path) -> None:
    """``d/report.html`` a folder: exit 1 (an OSError) after ``d/plots`` was made."""
    from agentbench.testing.demo import write_demo_run

    run, other = (write_demo_run(tmp_path / n, seed=0, hit=0.5, name=n, trees=2, turns=2)
                  for n in ("r", "s"))
    out = tmp_path / "d"
    (out / "report.html").mkdir(parents=True)
    r = CliRunner().invoke(app, ["report", str(run), str(other), "-o", str(out)])
    assert r.exit_code == 2 and "is a folder where the report writes its file" in r.output
    assert [p.name for p in out.iterdir()] == ["report.html"]


def test_report_to_a_folder_that_takes_no_new_folder_is_one_line(tmp_path: Path) -> None:
    """``report RUN -o /proc/x`` (a folder that refuses new folders; a read-only one
    alike): one line naming --output, exit 2, as run's -o. It was 'error: /proc/x: No
    such file or directory (--debug shows where)', exit 1."""
    from agentbench.testing.demo import write_demo_run

    run = write_demo_run(tmp_path / "r", seed=0, hit=0.5, name="r", trees=2, turns=2)
    r = CliRunner().invoke(app, ["report", str(run), "-o", "/proc/agentbench-report"])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "field '--output': cannot make the report's folder" in r.output


def test_a_bad_run_id_is_named_as_it_was_given(tmp_path: Path) -> None:
    """``--set output.run_id=...`` was named ``--run-id``, a flag not given."""
    q = str(ROOT / "scenarios" / "quickstart.yaml")
    for args, named in ((["--set", "output.run_id=a/b"], "--set output.run_id"),
                        (["--run-id", "a" * 300], "--run-id")):
        r = CliRunner().invoke(app, ["run", q, "-o", str(tmp_path), *args])
        assert r.exit_code == 2, r.output
        assert f"{named}: must be a plain folder name of at most 200 characters" in r.output


def test_commands_printed_to_paste_quote_a_folder_with_a_space(tmp_path: Path) -> None:
    """``run``'s closing ``report: agentbench report RUN...`` and the disk's ``agentbench
    recover RUN`` hint, for results under ``my results ü/``: each path one shell word
    (they were printed bare, so the pasted command named two folders that do not exist)."""
    import shlex

    import yaml

    from agentbench.errors import ResultsWriteError
    from agentbench.replay.runend import stopped_by

    out = tmp_path / "my results ü"
    sc = tmp_path / "two.yaml"
    sc.write_text(yaml.safe_dump({
        "name": "two", "endpoints": [{"kind": "simulated", "preset": "instant"}],
        "trace": {"kind": "synth", "profile": "codex", "sessions": 2},
        "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 2},
        "variants": [{"name": "a"}, {"name": "b"}]}))
    res = CliRunner().invoke(app, ["run", str(sc), "-o", str(out)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("report: "))
    words = shlex.split(line.removeprefix("report: "))
    assert words[:2] == ["agentbench", "report"] and len(words) == 4
    assert all(Path(w).is_dir() and Path(w).parent == out for w in words[2:])
    run = Path(words[2])
    (run / "requests.parquet.journal.jsonl").write_text("")  # rows left to recover
    hint = stopped_by(ResultsWriteError(str(run), "No space left on device"), run).hint
    assert shlex.split(hint.split("`")[1]) == ["agentbench", "recover", str(run)]


def test_a_run_folder_name_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    """A run folder named with an escape sequence and a line break (a downloaded artifact,
    a shared results folder, ``report results/*``): report's ``wrote`` line, gate's
    ``markdown:`` line and recover's status line wrote the name as it came, so it
    retitled the terminal and forged a line of output; every other line of text from a
    file already went out escaped."""
    from agentbench.testing.demo import write_demo_run

    forged = "x\x1b]0;retitled\x07\nerror: a forged line"
    base = write_demo_run(tmp_path / "base", trees=2, turns=2, concurrency=(1,), seed=2)
    run = write_demo_run(tmp_path / forged, trees=2, turns=2, concurrency=(1,), seed=2)
    for args in (["report", str(run)], ["gate", str(base), str(run)], ["recover", str(run)]):
        res = CliRunner().invoke(app, args, color=True)  # as on a terminal: nothing stripped
        assert res.exit_code == 0, res.output
        assert "\x1b" not in res.output and "\x07" not in res.output, res.output
        assert not any(ln.startswith("error: a forged") for ln in res.output.splitlines())
        assert "x\\x1b]0;retitled\\x07\\nerror: a forged line" in res.output, res.output


def test_a_written_file_name_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    """``traces synth -o`` and ``traces convert -o`` named the file they wrote as given:
    an escape sequence in it retitled the terminal and a line break forged a line."""
    forged = "x\x1b]0;retitled\x07\nerror: a forged line"
    synth = tmp_path / f"{forged}.parquet"
    conv = tmp_path / f"{forged}-2.parquet"
    for args in (["traces", "synth", "-p", "codex", "-n", "1", "-o", str(synth)],
                 ["traces", "convert", str(synth), "-o", str(conv)]):
        res = CliRunner().invoke(app, args, color=True)  # as on a terminal: nothing stripped
        assert res.exit_code == 0, res.output
        assert "\x1b" not in res.output and "\x07" not in res.output, res.output
        assert not any(ln.startswith("error: a forged") for ln in res.output.splitlines())
        assert "x\\x1b]0;retitled\\x07\\nerror: a forged line" in res.output, res.output
