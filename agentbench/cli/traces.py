"""``agentbench traces ...``: read, convert, synthesize and analyse traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from agentbench.cli.app import guarded, path_value, traces_app
from agentbench.errors import InputError, printable
from agentbench.traces import MAX_TOKENS, NOT_READER_OPTIONS


@traces_app.command("stats")
@guarded
def traces_stats(
    source: str = typer.Argument(..., help="Trace file, folder, dataset id, builtin:NAME, "
                                 "cache:NAME or synth:PROFILE[:SESSIONS]."),
    format: str | None = typer.Option(None, "--format", "-f", help="Reader; default: detect."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable JSON."),
    scale: float | None = typer.Option(
        None, "--scale", help="Scale token counts by this factor (0.001 to 1), keeping prefixes."),
    max_context: int | None = typer.Option(
        None, "--max-context", min=1, max=MAX_TOKENS, help="Cap every prompt at its first "
        f"N tokens (at most {MAX_TOKENS:,}, the most a request may count)."),
    option: list[str] = typer.Option(
        [], "--option", "-O", help="Reader option KEY=VALUE, e.g. tokenizer=tok.json, seed=3 "
        "(repeatable)."),
    skip_bad: bool = typer.Option(
        False, "--skip-bad", help="In a folder, skip bad trace files (each named on stderr) "
        "instead of stopping at them."),
) -> None:
    """Sessions, requests, token and time distributions, subagents, potential hit rate."""
    from agentbench.traces.stats import format_stats, trace_stats

    # read_trace takes skip_bad beside the reader options
    trace = _read_transformed(source, format, scale, max_context,
                              [*option, "skip_bad=true"] if skip_bad else option)
    _warn_skipped(trace)
    st = trace_stats(trace)
    from agentbench.traces.readers import tracelab

    files = tracelab.trace_files(trace)  # TraceLab's rounds say more: per provider
    fx = tracelab.facts(files, {s.session_id for s in trace.sessions}) if files else None
    if as_json:
        typer.echo(json.dumps({**st.to_dict(), **({"tracelab": fx} if fx else {})},
                              indent=2))
    else:
        typer.echo(format_stats(st) + (tracelab.format_facts(fx) if fx else ""))


@traces_app.command("convert")
@guarded
def traces_convert(
    source: str = typer.Argument(..., help="Trace file, folder, dataset id, builtin:NAME, "
                                 "cache:NAME or synth:PROFILE[:SESSIONS]."),
    output: Path = typer.Option(..., "--output", "-o",
                                help="Native parquet file to write (not there yet).",
                                parser=path_value),
    format: str | None = typer.Option(None, "--format", "-f", help="Reader; default: detect."),
    scale: float | None = typer.Option(
        None, "--scale", help="Scale token counts by this factor (0.001 to 1), keeping prefixes."),
    max_context: int | None = typer.Option(
        None, "--max-context", min=1, max=MAX_TOKENS, help="Cap every prompt at its first "
        f"N tokens (at most {MAX_TOKENS:,}, the most a request may count)."),
    option: list[str] = typer.Option(
        [], "--option", "-O", help="Reader option KEY=VALUE, e.g. tokenizer=tok.json, seed=3 "
        "(repeatable)."),
) -> None:
    """Write any readable trace in agentbench's native parquet format (refuses to
    overwrite -o)."""
    from agentbench.traces.output import (
        check_file_name,
        check_folder,
        check_new,
        check_parquet_name,
        new_file,
    )
    from agentbench.traces.readers import native

    check_file_name(output)
    check_parquet_name(output)
    check_new(output)  # before the read, which may take minutes
    check_folder(output)
    with new_file(output) as tmp:  # nothing at -o unless the trace is written whole
        trace = _read_transformed(source, format, scale, max_context, option)
        native.write(trace, tmp)
    _warn_skipped(trace)  # -O skip_bad=true left files out of the trace written
    typer.echo(printable(f"wrote {output} ({len(trace.sessions):,} sessions, "
                         f"{trace.n_requests():,} requests)"))


@traces_app.command("synth")
@guarded
def traces_synth(
    profile: str = typer.Option(..., "--profile", "-p",
                                help="Profile: agentx, codex, codex-tracelab, or a profile "
                                     "YAML file."),
    sessions: int = typer.Option(..., "--sessions", "-n", help="Root sessions to generate."),
    seed: int = typer.Option(0, "--seed", "-s", help="Random seed (0 is a seed)."),
    output: Path = typer.Option(..., "--output", "-o",
                                help="Native parquet file to write (not there yet).",
                                parser=path_value),
) -> None:
    """Synthesize a trace calibrated to a published agentic workload (native parquet;
    refuses to overwrite -o)."""
    from agentbench.traces.output import (
        check_file_name,
        check_folder,
        check_new,
        check_parquet_name,
        new_file,
    )
    from agentbench.traces.readers import native
    from agentbench.traces.synth import check_sessions, load_profile, synthesize

    check_sessions(sessions, field="--sessions")
    if seed < 0:
        raise InputError(f"must be >= 0, got {seed}", field="--seed")
    prof = load_profile(profile)
    check_file_name(output)
    check_parquet_name(output)
    check_new(output)
    check_folder(output)
    with new_file(output) as tmp:
        try:
            trace = synthesize(prof, sessions, seed)
        except InputError as e:  # a count the profile drew: name the profile
            raise e.located(source=profile) from None
        native.write(trace, tmp)
    typer.echo(printable(f"wrote {output} ({len(trace.sessions):,} sessions, "
                         f"{trace.n_requests():,} requests)"))


@traces_app.command("list")
@guarded
def traces_list(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable JSON."),
) -> None:
    """Bundled traces (builtin:NAME) with their facts, and the corpora `traces fetch` gets."""
    from agentbench.traces.sources import format_listing, listing

    data = listing()
    typer.echo(json.dumps(data, indent=2) if as_json else format_listing(data))


@traces_app.command("fetch")
@guarded
def traces_fetch(
    name: str = typer.Argument(..., help="Corpus name (see `agentbench traces list`)."),
    mirror: str | None = typer.Option(
        None, "--mirror", help="URL or folder serving MIRROR/NAME/<file> instead of upstream."),
) -> None:
    """Download a public corpus into the cache (checked by SHA-256); read it as cache:NAME."""
    from agentbench.traces.fetch import fetch

    out = fetch(name, mirror=mirror, log=lambda m: typer.echo(m, err=True))
    typer.echo(printable(f"fetched {name} into {out}; read it as cache:{name}"))


def _warn_skipped(trace: Any) -> None:
    """The bad files a folder's read left out (``skip_bad``), one line each on stderr, with
    what is not printable in a file's name escaped as an error line has it."""
    if trace.skipped:
        typer.echo(f"warning: skipped {len(trace.skipped)} bad trace file(s):", err=True)
        for line in trace.skipped:
            typer.echo(f"warning: {printable(line)}", err=True)


def _reader_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values read as YAML scalars (numbers, booleans, strings)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"expected KEY=VALUE, got {item!r}", field="--option")
        if key.strip() in NOT_READER_OPTIONS:  # read_trace's own: a TypeError traceback
            raise InputError(f"{key.strip()!r} is not a reader option (the trace is "
                             "SOURCE, its format --format)", field="--option")
        out[key.strip()] = yaml.safe_load(value) if value else ""
    return out


def _read_transformed(source: str, format: str | None, scale: float | None,
                      max_context: int | None, options: list[str] | None = None) -> Any:
    from agentbench.traces import transform
    from agentbench.traces.readers import read_trace

    if scale is not None:  # before the read, which may take minutes
        transform.check_scale(scale, field="--scale")
    if source.startswith("synth:"):  # as `run --trace` takes it
        from agentbench.scenario.flags import trace_spec
        from agentbench.traces.synth import synthesize

        spec = trace_spec(source, where="SOURCE")
        trace = synthesize(spec["profile"], sessions=spec["sessions"], seed=0)
    else:
        trace = read_trace(source, format=format, **_reader_options(options or []))
    if max_context is not None:
        trace = transform.truncate(trace, max_context)
    if scale is not None:
        trace = transform.scale(trace, scale)
    return trace
