"""``agentbench report`` and ``agentbench gate``: reports and the CI gate over run folders."""

from __future__ import annotations

from pathlib import Path

import typer

from agentbench.cli.app import app, distinct_runs, guarded, path_value
from agentbench.errors import InputError, printable


@app.command()
@guarded
def report(
    runs: list[Path] = typer.Argument(..., help="Results folder(s); several: a comparison.",
                                      parser=path_value),
    output: Path | None = typer.Option(None, "--output", "-o", help="Output folder; default: "
                                       "the run's folder (one run) or ./report (several).",
                                       parser=path_value),
    reference: Path | None = typer.Option(
        None, "--reference", "-r", help="The run the others are compared against (one of "
        "RUNS, or a name within them); default: the first given.", parser=path_value),
) -> None:
    """Render report.html (self-contained) and report.md for one run or a comparison."""
    from agentbench.metrics.run import load
    from agentbench.metrics.summary import NO_SESSIONS
    from agentbench.report.render import render, workload_differences

    # one run twice (RUN and RUN/) compared itself with itself without a word
    distinct_runs(runs, "a report compares distinct runs")
    if reference is not None:
        runs = _reference_first(runs, reference)
    loaded = [load(r) for r in runs]  # once, for the report and its terminal warning
    html, md = render(loaded, output)
    # a folder name holding an escape sequence or a line break goes out escaped
    typer.echo(printable(f"wrote {html} and {md}"))
    differ = workload_differences(loaded) if len(loaded) > 1 else None
    if differ is not None:
        typer.echo(printable(f"warning: {differ}"), err=True)
    for r in loaded:  # its agents' figures are fallbacks: said in the report, and here
        if NO_SESSIONS in r.time_base.warnings:
            typer.echo(f"warning: {r.name}: {NO_SESSIONS}", err=True)


@app.command()
@guarded
def gate(
    runs: list[Path] = typer.Argument(..., metavar="BASELINE... CANDIDATE", help="Baseline "
                                      "results folder(s), then the candidate's. Several "
                                      "baselines (identical re-runs, e.g. run --repeat 3): "
                                      "the run is the unit (docs/ci.md).", parser=path_value),
    rules: Path | None = typer.Option(None, "--rules", help="Rules YAML; default: built-in.",
                                      parser=path_value),
    confidence: float | None = typer.Option(None, "--confidence",
                                            help="Confidence level (default 0.95)."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Markdown for a PR "
                                         "comment; default: <candidate>/gate.md.",
                                         parser=path_value),
    allow: str | None = typer.Option(
        None, "--allow", help="Fingerprint fields that may differ, comma-separated: trace, "
        "filters, transform, load, timing, time_base, endpoint(s)."),
) -> None:
    """Fail (exit 1) when the candidate regresses past a rule with confidence; 2: bad input
    or runs that are not comparable (their fingerprints differ beyond --allow)."""
    from agentbench.report.gate import evaluate, format_markdown, format_table
    from agentbench.report.gaterules import load_rules
    from agentbench.scenario.fingerprint import parse_allow
    from agentbench.traces.smallfile import write_text

    if len(runs) < 2:
        raise InputError("give a baseline and a candidate results folder (several "
                         "baselines before the candidate)", source="agentbench gate")
    # a baseline given twice counted as two identical re-runs: no spread between runs, so
    # a rule's interval shrank to its point (detectable +-0.0%) and any change past a
    # threshold failed as certain. A run gated against itself alone still passes (+0.0%)
    if len(runs) > 2:
        distinct_runs(runs, "the run is the unit of several baselines: give each run once, "
                      "the candidate among them neither")
    *baselines, candidate = runs

    allowed = parse_allow(allow)
    rule_list, opts = load_rules(rules)
    if confidence is not None:
        if not 0.5 <= confidence < 1:
            raise InputError("must be in [0.5, 1)", source="--confidence")
        opts.confidence = confidence
    result = evaluate(list(baselines), candidate, rule_list, opts, allowed)
    typer.echo(format_table(result))
    md_path = markdown or candidate / "gate.md"
    try:
        # a FIFO that nothing reads is refused (ENXIO), not waited on forever
        write_text(md_path, format_markdown(result, ", ".join(map(str, baselines)),
                                            str(candidate)))
    except OSError as e:  # exit 1 would say a rule regressed
        raise InputError(f"cannot write the Markdown there ({e.strerror or e})",
                         source=str(md_path), field="--markdown") from None
    typer.echo(printable(f"markdown: {md_path}"))
    raise typer.Exit(0 if result.passed else 1)


def _reference_first(runs: list[Path], reference: Path) -> list[Path]:
    """``runs`` with ``reference`` first: the same folder; else, for a bare name, the run
    whose folder is named so, else the one whose name starts with it, else the one that
    contains it (``--reference shared-tier``). A path that is none of the runs is refused
    (``/elsewhere/b`` chose the run named ``b``)."""
    same = [r for r in runs if r.resolve() == reference.resolve()]
    if not same and len(reference.parts) > 1:
        raise InputError(f"--reference {reference} is none of the runs given; give one of "
                         "them, or a name within them", source="agentbench report")
    if not same:
        name = reference.name
        same = ([r for r in runs if r.name == name]
                or [r for r in runs if r.name.startswith(name)]
                or [r for r in runs if name in r.name])
    if len(same) != 1:
        what = "none" if not same else ", ".join(r.name for r in same)
        raise InputError(f"--reference {reference} matches {what} of the runs given; name "
                         "exactly one", source="agentbench report")
    return [same[0], *[r for r in runs if r is not same[0]]]
