"""The command line as a user runs it: instant help, stats, convert, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

HEAVY = ("pandas", "matplotlib", "datasets", "pyarrow", "aiohttp", "numpy")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentbench.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_help_does_not_import_heavy_libraries() -> None:
    code = ("import sys, agentbench.cli; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    res = run("--help")
    assert res.returncode == 0 and "traces" in res.stdout and "validate" in res.stdout


def test_version_as_an_option_and_a_command() -> None:
    from agentbench import __version__

    for args in (("--version",), ("version",)):
        res = run(*args)
        assert (res.returncode, res.stdout) == (0, f"{__version__}\n"), res.stderr


def test_stats_json_on_the_weka_traces(weka_dir: Path) -> None:
    res = run("traces", "stats", str(weka_dir), "--json")
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)
    assert st["roots"] == 40 and st["requests"] == 2790 and st["spawns"] == 28
    assert st["potential_hit_rate"] == pytest.approx(0.951, abs=0.001)
    for key in ("turns_per_root", "input_tokens", "output_tokens", "think_s",
                "context_growth_per_turn", "subagents_per_root_with_subagents"):
        assert set(st[key]) == {"p50", "p90", "p99", "mean"}


def test_stats_text_names_every_figure(weka_dir: Path) -> None:
    res = run("traces", "stats", str(weka_dir))
    assert res.returncode == 0, res.stderr
    for word in ("sessions", "requests", "turns per root", "input tokens", "output tokens",
                 "input:output", "subagents", "think time", "context growth",
                 "potential hit rate"):
        assert word in res.stdout


def test_convert_then_stats_agree(weka_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.parquet"
    res = run("traces", "convert", str(weka_dir), "-o", str(out))
    assert res.returncode == 0, res.stderr
    a = json.loads(run("traces", "stats", str(weka_dir), "--json").stdout)
    b = json.loads(run("traces", "stats", str(out), "--json").stdout)
    a.pop("name"), b.pop("name")
    assert a == b


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ('{"block_size": 64, "requests": [{"t": 0, "in": 10, "out": -1, "hash_ids": []}]}',
         "requests[0]: field 'out': negative length -1"),
        ('{"block_size": 64, "requests": [{"t": 0, "in": 10, "out": 5, "hash_ids": [1, 2]}]}',
         "requests[0]: field 'hash_ids'"),
        ('{"block_size": 64, "requests": [{"t": 0, "out": 5, "hash_ids": [1]}]}',
         "requests[0]: field 'in': missing"),
        ('{"block_size": 64, "requests": [{"t": 0, "in": 10, ', "invalid JSON"),
    ],
)
def test_bad_trace_is_one_line_exit_2(tmp_path: Path, content: str, expect: str) -> None:
    f = tmp_path / "trace_bad.json"
    f.write_text(content)
    res = run("traces", "stats", str(f), "--format", "weka")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and expect in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_a_scenario_given_as_a_trace_is_named_so() -> None:
    """``traces stats scenario.yaml`` said "not valid JSON (Expecting value)"."""
    from tests.helpers import SCENARIOS

    f = SCENARIOS / "quickstart.yaml"
    res = run("traces", "stats", str(f))
    assert res.returncode == 2 and res.stderr.strip() == (
        f"error: {f}: a YAML file, not a trace (traces are JSON, JSONL, parquet or gzip; a "
        "scenario names its trace under trace.source)"), res.stderr


def test_an_empty_trace_source_is_one_line_not_the_working_folder(tmp_path: Path) -> None:
    """``traces stats ''`` read the working folder (``Path('')`` is ``.``)."""
    from agentbench.errors import InputError
    from agentbench.scenario.loading import parse_scenario
    from agentbench.traces.readers import read_trace

    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "traces", "stats", ""],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == (
        "error: field 'source': an empty trace source (give a file, folder, dataset id or "
        "builtin:NAME)"), res.stderr
    for blank in ("", "  "):
        with pytest.raises(InputError, match="an empty trace source"):
            read_trace(blank)
    with pytest.raises(InputError, match="trace.source: String should have at least 1"):
        parse_scenario("name: x\nendpoints: [{kind: simulated}]\n"
                       "trace: {kind: file, source: ''}\nload: {kind: lanes, concurrency: 1}\n")


def test_an_empty_output_dir_is_one_line_not_the_working_folder(tmp_path: Path) -> None:
    """``output.dir: ''`` (or ``--set output.dir=''``) wrote the run folder into the
    working folder (``Path('')`` is ``.``), where ``-o ''`` is refused."""
    from agentbench.errors import InputError
    from agentbench.scenario.loading import parse_scenario

    with pytest.raises(InputError, match="output.dir: String should have at least 1"):
        parse_scenario("name: x\nendpoints: [{kind: simulated}]\ntrace: {kind: synth, "
                       "profile: codex, sessions: 1}\nload: {kind: lanes, concurrency: 1}\n"
                       "limits: {max_requests: 1}\noutput: {dir: ''}\n")
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "run",
                          str(ROOT / "scenarios" / "quickstart.yaml"), "--set", "output.dir=''",
                          "--set", "limits.max_requests=2", "--no-progress"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and "--set output.dir" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


@pytest.mark.parametrize(("args", "says"), [
    (["report"], "agentbench.cli report: Missing argument 'runs'"),
    (["docs", "metrics", "ci"], "agentbench.cli docs: Got unexpected extra argument(s) (ci)"),
    (["run", "--repeat", "0"], "agentbench.cli run: Invalid value for '--repeat'"),
    (["run", "--bogus"], "agentbench.cli run: No such option: --bogus"),
    (["traces", "convert", "x"], "agentbench.cli traces convert: Missing option '--output'"),
    (["bogus"], "agentbench.cli: No such command 'bogus'"),
])
def test_a_usage_error_is_one_line_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    """A missing or extra argument, an unknown option or command, or a value its type
    refuses: click's usage, a hint and the error (4 lines, one blank) became one line."""
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", *args], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and says in lines[0], lines[0]
    assert lines[0].endswith("(see --help)") and not res.stdout
    # asking for nothing still shows the help
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "traces"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "Commands:" in res.stdout + res.stderr


def test_docs_with_an_empty_name_is_one_line_not_the_list(tmp_path: Path) -> None:
    """``agentbench docs ''`` (a shell variable never set) printed the list, exit 0."""
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "docs", ""],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and not res.stdout, res.stdout
    assert res.stderr.strip() == ("error: field 'NAME': empty: give a doc's name "
                                  "(agentbench docs lists them)"), res.stderr


@pytest.mark.parametrize("args", [["docs"], ["docs", "metrics"],
                                  ["traces", "stats", "builtin:mooncake-conversation"]])
def test_a_reader_that_goes_away_is_no_error(tmp_path: Path, args: list[str]) -> None:
    """``agentbench docs | head -1``: the pipe closed before the output ended printed
    'error: Broken pipe (--debug shows where)' under head's line."""
    p = subprocess.Popen([sys.executable, "-m", "agentbench.cli", *args], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # before it writes: every write finds no reader
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1 and err == "", err


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text('{"block_size": 64, "requests": [{"t": 0, "in": -1, "out": 1, "hash_ids": []}]}')
    res = run("--debug", "traces", "stats", str(f), "--format", "weka")
    plain = run("traces", "stats", str(f), "--format", "weka")
    assert "Traceback" in res.stderr and "Traceback" not in plain.stderr
    # the same exit code and the same last line (bad input: 2; it was 1 with --debug)
    assert res.returncode == plain.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == plain.stderr.strip(), res.stderr


def test_validate_prints_every_problem(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nendpoints:\n  - kind: openai\n    url: http://h\n    modle: m\n"
                 "trace: {kind: synth, profile: codex, sessions: 2}\n"
                 "load: {kind: lanes, concurrency: 0}\nlimits: {max_sessions: 2}\n")
    res = run("validate", str(f))
    assert res.returncode == 2
    err = res.stderr
    assert "endpoints.0.modle: unknown key" in err and "load.concurrency" in err
    assert f"{f}:5:" in err  # the typo's line


def test_reader_options_reach_the_reader(tmp_path: Path) -> None:
    f = tmp_path / "conv.json"
    f.write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "Fix the failing test in parser.py"},
        {"from": "gpt", "value": "Reading parser.py."},
        {"from": "human", "value": "Here is the output of the test run."},
        {"from": "gpt", "value": "The off-by-one is on line 12."},
    ]}]))
    think = {}
    for seed in (3, 4):
        res = run("traces", "stats", str(f), "--json", "-O", f"seed={seed}")
        assert res.returncode == 0, res.stderr
        think[seed] = json.loads(res.stdout)["think_s"]["p50"]
    assert think[3] != think[4]  # the seed drew different think times
    res = run("traces", "stats", str(f), "-O", "tokeniser=x")
    assert res.returncode == 2 and "unknown option 'tokeniser'" in res.stderr


@pytest.mark.parametrize("key", ["format", "source", "sessions"])
def test_an_option_naming_read_traces_own_argument_is_one_line(key: str) -> None:
    """``-O format=weka`` reached read_trace as a second value of its own argument: a
    TypeError traceback."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    r = CliRunner().invoke(app, ["traces", "stats", "builtin:mooncake-synthetic", "-O",
                                 f"{key}=x"])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith("error: field '--option'") and "not a reader option" in lines[0]


def test_traces_stats_takes_a_synthetic_source_as_run_does() -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    r = CliRunner().invoke(app, ["traces", "stats", "synth:codex:3", "--json"])
    assert r.exit_code == 0, r.output
    import json

    assert json.loads(r.output)["roots"] == 3


def test_traces_stats_and_convert_help_name_every_source_they_take() -> None:
    """Both read any source run takes (builtin:, cache:, synth:); their help named fewer
    (convert's only a file, folder or dataset id)."""
    import typer

    from agentbench.cli import app

    traces = typer.main.get_command(app).commands["traces"]  # type: ignore[attr-defined]
    for name in ("stats", "convert"):
        source = next(p for p in traces.commands[name].params if p.name == "source")
        for form in ("builtin:NAME", "cache:NAME", "synth:PROFILE[:SESSIONS]"):
            assert form in source.help, (name, source.help)


def test_docs_lists_and_prints_the_docs_messages_name() -> None:
    res = run("docs")
    assert res.returncode == 0, res.stderr
    listed = [ln.split()[0] for ln in res.stdout.splitlines()[:-1]]
    assert listed == sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for name in ("metrics", "metrics.md", "docs/metrics.md"):  # as messages write it
        res = run("docs", name)
        assert res.returncode == 0
        assert res.stdout == (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    for bad in ("../README", "nope", "/etc/passwd"):
        res = run("docs", bad)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
        assert "the docs: agentx, architecture" in res.stderr, res.stderr


def test_workers_ignored_in_virtual_time_is_said_on_the_terminal(tmp_path: Path) -> None:
    """``run scenarios/quickstart.yaml --workers 2`` (virtual time: one process whatever
    it asks) ran on one process and said so only in run.json's ``workers_note``: now one
    warning line on stderr, once for all the repeats; none without --workers."""
    from tests.helpers import SCENARIOS

    f = str(SCENARIOS / "quickstart.yaml")
    res = run("run", f, "--workers", "2", "--repeat", "2", "-o", str(tmp_path / "a"),
              "--no-progress")
    assert res.returncode == 0, res.stderr
    said = [ln for ln in res.stderr.splitlines() if "--workers 2" in ln]
    assert said == ["warning: --workers 2 ignored: a virtual-clock run is one process"], \
        res.stderr
    notes = {json.loads((d / "run.json").read_text())["workers_note"]
             for d in (tmp_path / "a").iterdir()}
    assert notes == {said[0].removeprefix("warning: ")}
    res = run("run", f, "-o", str(tmp_path / "b"), "--no-progress")
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr


@pytest.mark.parametrize("value", ["99999999999999999999999", "10000001", "0", "-5"])
def test_max_context_is_bounded_and_its_errors_name_the_option(tmp_path: Path,
                                                              value: str) -> None:
    """``traces stats --max-context 99999999999999999999999`` was taken (a cap above any
    request), and 0 said "field 'max_context_tokens': must be positive", a name the user
    never typed; ``sim fit --max-context`` had no upper bound either (its grid's prompts
    are sized by it). Each is one line naming ``--max-context``, exit 2, before any
    read, and ``traces convert`` writes nothing."""
    out = tmp_path / "t.parquet"
    for args in (["traces", "stats", "builtin:claude-code-weka"],
                 ["traces", "convert", "builtin:claude-code-weka", "-o", str(out)],
                 ["sim", "fit", "-o", str(tmp_path / "p.yaml"), "--endpoint",
                  "http://127.0.0.1:9"]):
        res = run(*args, "--max-context", value)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert "'--max-context'" in lines[0] and "max_context_tokens" not in lines[0], lines
    assert not out.exists() and list(tmp_path.iterdir()) == []
    res = run("traces", "stats", "builtin:claude-code-weka", "--max-context", "10000000")
    assert res.returncode == 0 and "@max10000000" in res.stdout, res.stderr


@pytest.mark.parametrize("error", [MemoryError(), "arrow",
                                   ImportError("libarrow.so: failed to map segment from "
                                               "shared object", name="pyarrow.lib")])
def test_out_of_memory_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   error: BaseException | str) -> None:
    """``ulimit -v`` too small for a run: pyarrow's ArrowMemoryError while the finished run
    was summarized, a MemoryError, or an ImportError of a library that could not be mapped
    was a traceback of 50 lines; now one line, exit 1 (the traceback with --debug)."""
    import pyarrow as pa
    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.experiment import run as experiment_run

    if error == "arrow":
        error = pa.lib.ArrowMemoryError("realloc of size 131072 failed")

    def refused(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(experiment_run, "run_experiment", refused)
    q = str(ROOT / "scenarios" / "quickstart.yaml")
    r = CliRunner().invoke(app, ["run", q, "-o", str(tmp_path)])
    assert r.exit_code == 1 and not isinstance(r.exception, type(error)), r.exception
    assert r.output.count("\n") == 1 and r.output.startswith("error: "), r.output
    assert str(error).split(":")[0] in r.output
