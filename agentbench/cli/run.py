"""``agentbench run`` (a thin wrapper over ``agentbench.experiment.run_experiment``) and
``agentbench recover``."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Any

import typer

from agentbench.cli.app import app, guarded, path_value
from agentbench.errors import InputError, printable


def _default_trace() -> str:
    from agentbench.scenario.flags import DEFAULT_TRACE

    return DEFAULT_TRACE


@app.command()
@guarded
def run(
    scenario: Path | None = typer.Argument(
        None, help="Scenario YAML file; none: a scenario built from --url, --model and the "
        "other flags.", parser=path_value),
    url: str | None = typer.Option(None, "--url", help="Without a scenario file: the "
                                   "OpenAI-compatible server's base URL (with or without /v1)."),
    model: str | None = typer.Option(None, "--model", help="Without a file: model name sent."),
    api: str | None = typer.Option(None, "--api", help="Without a file: chat (default), "
                                   "completions, responses or messages."),
    concurrency: int | None = typer.Option(
        None, "--concurrency", help="Without a file: closed loop of N agent lanes (default 4)."),
    rate: float | None = typer.Option(
        None, "--rate", help="Without a file: open loop, agent sessions arriving per second "
        "(Poisson)."),
    trace: str | None = typer.Option(
        None, "--trace", help="Without a file: a trace file, folder, dataset id, builtin:NAME "
        "or synth:PROFILE[:SESSIONS]; default: " + _default_trace() + "."),
    duration: float | None = typer.Option(
        None, "--duration", help="Without a file: seconds per stage (default 60 unless "
        "--max-requests is given)."),
    max_requests: int | None = typer.Option(None, "--max-requests",
                                            help="Without a file: requests per stage."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of every random choice "
                                    "(scenario key seed; 0 is a seed)."),
    rules: str | None = typer.Option(
        None, "--rules", help="Benchmark rules (scenario key rules): agentx locks AgentX's "
        "settings and gives the run a validity verdict (docs/agentx.md)."),
    unsafe_override: bool = typer.Option(
        False, "--unsafe-override", help="With --rules: run despite conflicting settings "
        "(the run is then invalid: unsafe_override)."),
    set_: list[str] = typer.Option(
        [], "--set", help="KEY.PATH=VALUE: override a scenario key (value read as YAML, "
        "validated like the file), e.g. --set limits.duration_s=30 (repeatable)."),
    output: Path | None = typer.Option(None, "--output", "-o",
                                       help="Parent folder of run folders (output.dir).",
                                       parser=path_value),
    run_id: str | None = typer.Option(None, "--run-id", help="Run folder name (output.run_id)."),
    progress: bool | None = typer.Option(None, "--progress/--no-progress",
                                         help="A progress bar on a terminal; off one (a "
                                         "CI log, a pipe) a progress line every 10 s; "
                                         "--no-progress: neither."),
    workers: str = typer.Option("1", "--workers",
                                help="Client processes the lanes are sharded over: a count "
                                     "(at most 1,024) or 'auto' (from each endpoint's "
                                     "measured stream rate and the lanes, up to one per "
                                     "CPU)."),
    repeat: int = typer.Option(1, "--repeat", min=1, help="Run each variant N times (at "
                               "most 1,000) and print its figures over the runs with 95% "
                               "intervals (wall clock: the same seed; virtual time: seed + "
                               "i)."),
    ray: str | None = typer.Option(
        None, "--ray", metavar="ADDRESS", help="Run on a Ray cluster: 'local' (a Ray "
        "started here), 'auto' (the cluster `ray start` began here) or a cluster address. "
        "Simulated variants in virtual time run side by side as Ray tasks; a variant that "
        "measures an endpoint sends its load from Ray actors on every node (docs/scale.md)."),
    workers_per_node: int = typer.Option(
        1, "--workers-per-node", min=1, help="With --ray: load workers (one process, one "
        "CPU each) on each Ray node for a variant that measures an endpoint."),
) -> None:
    """Replay a scenario against its endpoints, write results/<run-id>/, print a summary.

    Without a scenario file, --url and --model build one (written to run.json).

    A scenario with variants runs once per variant and compares the runs at the end."""
    flags: dict[str, Any] = {"api": api, "concurrency": concurrency, "rate": rate,
                             "trace": trace, "duration_s": duration, "max_requests": max_requests}
    base = _scenario(scenario, set_, output, run_id, url=url, model=model, seed=seed,
                     rules=rules, unsafe_override=unsafe_override, flags=flags)
    from agentbench.experiment.arguments import OPTIONS
    from agentbench.experiment.run import run_experiment

    if ray is not None and workers != "1":
        raise InputError("--ray and --workers: choose one (with --ray, --workers-per-node "
                         "sets the load workers on each node)", source="agentbench run")
    if ray is None and workers_per_node != 1:
        raise InputError("--workers-per-node needs --ray", source="agentbench run")
    try:
        result = run_experiment(base, scenario_path=scenario, listener=_RunPrinter(),
                                progress=progress, workers=workers, ray=ray,
                                workers_per_node=workers_per_node, repeat=repeat)
    except InputError as e:  # an argument's error names the option typed (--repeat)
        if e.field not in OPTIONS:
            raise
        raise InputError(e.message, source=e.source, where=e.where,
                         field=OPTIONS[e.field]) from None
    for line in result.failed:
        typer.echo(f"failed: {line}", err=True)
    for line in result.invalid:
        typer.echo(f"invalid: {line}", err=True)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _scenario(scenario: Path | None, set_: list[str], output: Path | None, run_id: str | None,
              *, url: str | None, model: str | None, seed: int | None, rules: str | None,
              unsafe_override: bool, flags: dict[str, Any]) -> Any:
    """The validated scenario of ``agentbench run``: the file's, with ``--set``,
    ``--seed``, ``--rules`` and ``--unsafe-override`` applied, or one built from ``--url``,
    ``--model`` and the other ``flags`` (refused beside a file); ``--output`` and
    ``--run-id`` win over both."""
    from agentbench.scenario.loading import load_scenario, parse_set

    sets = [parse_set(item) for item in set_]
    # --output and --run-id win over the file and --set; validated like them, named as typed
    outputs = [(k, v) for k, v in (("output.dir", None if output is None else str(output)),
                                   ("output.run_id", run_id)) if v is not None]
    # named as typed: an --set output.run_id is named so, not as --run-id
    out_labels = {k: lbl for k, lbl in (("output.dir", "--output"), ("output.run_id",
                                                                    "--run-id"))
                  if k in dict(outputs)}
    if scenario is None:
        from agentbench.scenario.flags import scenario_from_flags

        base = scenario_from_flags(url, model, sets=[*sets, *outputs], set_labels=out_labels,
                                   seed=seed, rules=rules,
                                   unsafe_override=unsafe_override or None, **flags)
    else:
        from agentbench.scenario.flags import FLAG_KEYS

        given = {k: v for k, v in {"url": url, "model": model, **flags}.items()
                 if v is not None}
        if given:
            # each flag's own key; a number is repeated, text (a URL, maybe with its
            # password) is not
            sets_ = " ".join(
                f"--set {'trace.source' if k == 'trace' else FLAG_KEYS[k][1]}="
                + (str(v) if isinstance(v, int | float) else k.upper())
                for k, v in given.items())
            raise InputError(f"{', '.join(FLAG_KEYS[k][0] for k in given)}: only for a run "
                             f"without a scenario file; with {scenario}, use {sets_}",
                             source="agentbench run")
        extra = [(k, v) for k, v in (("seed", seed), ("rules", rules),
                                     ("unsafe_override", unsafe_override or None))
                 if v is not None]
        flag = {"seed": "--seed", "rules": "--rules", "unsafe_override": "--unsafe-override"}
        # a flag's name only where the flag was given (``--set seed=...`` is named so)
        base = load_scenario(scenario, labels={**{k: flag[k] for k, _ in extra},
                                               **out_labels},
                             sets=[*sets, *extra, *outputs])
    return base


def _say(line: str) -> None:
    """A line on stderr while runs go on: a stderr that refuses it (a full disk, a closed
    pipe) loses the line, not the run (whose run.json would stay ``running``)."""
    with contextlib.suppress(OSError):
        typer.echo(line, err=True)


class _RunPrinter:
    """``agentbench run``'s account of an experiment (``agentbench.experiment.Listener``):
    progress lines on stderr, each run's summary and the comparison on stdout."""

    def __init__(self) -> None:
        self.said: set[str] = set()  # a note every repeat's run.json holds, said once

    def variant_started(self, scenario: Any, of: int) -> None:
        if of > 1:
            _say(f"== {scenario.name}")

    def run_started(self, run_dir: Path) -> None:
        _say(f"results: {run_dir}")

    def trace_warning(self, line: str) -> None:
        _say(f"warning: skipped bad trace file {line}")

    def variant_done(self, run: Any) -> None:
        from agentbench.metrics import format_summary

        # --workers 2 in virtual time: ignored, and said in run.json alone
        note = run.info.get("workers_note")
        if note and note not in self.said:
            self.said.add(note)
            _say(f"warning: {note}")
        typer.echo(format_summary(run.summary))
        if (auto := run.info.get("workers_auto")) is not None:
            typer.echo(f"workers       {run.info['workers']} (--workers auto: {auto['why']})")
        if (placed := run.info.get("ray")) is not None:
            typer.echo(ray_line(placed))
        typer.echo(f"results: {run.run_dir}")
        if run.warning is not None:
            typer.echo(f"warning: {run.run_dir.name}: {run.warning}", err=True)

    def repeated(self, name: str, table: dict[str, Any]) -> None:
        from agentbench.metrics.repeats import format_repeats

        n = max((row.get("n", 0) for row in table.values()), default=0)
        typer.echo("\n".join(["", f"{name}: {n} runs (mean and 95% interval of the mean)",
                              *format_repeats(table)]))

    def repeats_stopped(self, name: str, finished: int, of: int,
                        table: dict[str, Any] | None) -> None:
        from agentbench.metrics.repeats import format_repeats

        head = f"{name}: {finished} of {of} runs finished before the stop"
        if table is None:
            typer.echo(f"\n{head}: no interval under 2 runs")
            return
        typer.echo("\n".join(["", f"{head} (mean and 95% interval of the mean)",
                              *format_repeats(table)]))

    def compared(self, result: Any) -> None:
        if not result.by_trace:
            typer.echo("\n".join(["", "comparison (against the first variant):",
                                  *result.comparison.headlines]))
            shown = [result.comparison]
        else:  # the variants replay several traces: each against its own trace's first
            typer.echo("\n".join([
                "", "comparison (each variant against the first variant that replays the "
                "same trace):", *(h for c in result.by_trace for h in c.headlines),
                "across traces (the first variant of each; the workloads differ):",
                *result.across_traces.headlines]))
            shown = [*result.by_trace, result.across_traces]
        for w in dict.fromkeys(w for c in shown for w in c.warnings):
            typer.echo(f"warning: {w}", err=True)
        for runs in _report_groups(result):
            # quoted for the shell: a folder with a space or a quote is pasted as one word
            typer.echo("report: agentbench report " + " ".join(shlex.quote(str(r.run_dir))
                                                               for r in runs))


def _report_groups(result: Any) -> list[list[Any]]:
    """The runs each ``report`` line names: all of them, or those of each trace (with
    their repeats; a trace one variant replays too) when the variants replay several
    traces (``result.trace_groups``). ``result.runs`` holds each variant's repeats in
    turn."""
    if not result.by_trace:
        return [result.runs]
    n = len(result.comparison.runs)
    per = len(result.runs) // n
    if per * n != len(result.runs):
        return [result.runs]
    return [[r for i in g for r in result.runs[i * per:(i + 1) * per]]
            for g in result.trace_groups]


def ray_line(placed: dict[str, Any]) -> str:
    """Where the load came from: workers per node, the largest clock offset and its bound,
    the nodes lost."""
    ws = placed.get("workers") or []
    nodes = {w["node"] for w in ws}
    off = max((abs(w["clock_offset_ns"]) for w in ws), default=0) / 1e6
    rtt = max((w["clock_rtt_ns"] for w in ws), default=0) / 2e6
    per = placed.get("workers_per_node")
    capped = (f" (--workers-per-node {per} capped by the nodes' CPUs and the lanes)"
              if per and len(ws) < per * len(nodes) else "")
    line = (f"ray           {len(ws)} load worker{'s' * (len(ws) != 1)} on {len(nodes)} "
            f"node{'s' * (len(nodes) != 1)}{capped}; clock offsets to this host up to "
            f"{off:.3f} ms (each within {rtt:.3f} ms)")
    for x in placed.get("lost") or []:
        line += (f"; LOST worker {x['worker']} on {x['hostname']} {x['node'][:8]} at "
                 f"{x['at_s']:.1f} s ({x['requests_cut']} requests in flight cut)")
    return line


@app.command()
@guarded
def recover(
    runs: list[Path] = typer.Argument(..., help="Results folder(s) of runs cut short.",
                                      parser=path_value),
    force: bool = typer.Option(False, "--force", help="Finish the run even if run.json's "
                               "pid still runs or is on another host (a copied run, a "
                               "reused pid)."),
) -> None:
    """Finish runs that were cut short (killed, crashed): spooled rows become parquet files
    and run.json says killed. load, report and gate do this by themselves. A run.json that
    is not valid JSON is kept as run.json.bad and a new one written (docs/reliability.md)."""
    from agentbench.results.reader import check_tables
    from agentbench.results.runfolder import recover_if_cut_short, require_run_json, run_folder

    damaged = 0
    for d in map(run_folder, runs):
        require_run_json(d)  # a mistyped folder is not "nothing to recover"
        made = recover_if_cut_short(d, force=force, on_damaged=lambda line: typer.echo(
            printable(f"warning: {line}"), err=True))
        if not made:
            try:
                check_tables(d)
            except InputError as e:  # the runs after it are still recovered (they were
                damaged += 1         # left cut short), and the exit is 2 at the end
                typer.echo(f"error: {printable(e.one_line())}", err=True)  # as guarded's
                continue
        typer.echo(printable(f"{d}: " + (f"recovered {', '.join(made)}" if made
                                         else "nothing to recover")))
    if damaged:
        raise typer.Exit(2)
