"""The ``agentbench`` command line: parse, validate, call one function, print where results
are. Heavy imports happen inside the commands so ``agentbench --help`` stays instant."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from agentbench.errors import InputError, ResultsWriteError

app = typer.Typer(
    name="agentbench",
    help="Replay agentic coding workloads against OpenAI-compatible endpoints.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
traces_app = typer.Typer(help="Read, convert, synthesize and analyse traces.",
                         no_args_is_help=True)
app.add_typer(traces_app, name="traces")

F = TypeVar("F", bound=Callable[..., Any])
_STATE = {"debug": False}


def guarded(fn: F) -> F:
    """Bad input becomes one line on stderr and exit code 2 (a traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as e:
            if _STATE["debug"]:
                raise
            lines = e.lines() if hasattr(e, "lines") else [e.one_line()]
            for line in lines:
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(2) from None
        except ResultsWriteError as e:
            if _STATE["debug"]:
                raise
            typer.echo(f"error: {e.one_line()}", err=True)
            raise typer.Exit(1) from None
        except OSError as e:  # a disk that is full or read-only, a file that vanished
            if _STATE["debug"]:
                raise
            where = f"{e.filename}: " if e.filename else ""
            text = " ".join(str(e.strerror or e).split())
            typer.echo(f"error: {where}{text} (--debug shows where)", err=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    _STATE["debug"] = debug


@app.command()
@guarded
def version() -> None:
    """Print the agentbench version."""
    from agentbench import __version__

    typer.echo(__version__)


@app.command()
@guarded
def validate(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
) -> None:
    """Check a scenario and print every problem with its key path."""
    from agentbench.scenario.loading import check_scenario, load_scenario

    sc = load_scenario(scenario)
    _, warnings = check_scenario(sc, scenario.resolve().parent)
    for w in warnings:
        typer.echo(f"warning: {scenario}: {w}", err=True)
    typer.echo(f"{scenario}: ok ({sc.name})")


@traces_app.command("stats")
@guarded
def traces_stats(
    source: str = typer.Argument(..., help="Trace file, folder, dataset id, builtin:NAME or "
                                 "cache:NAME."),
    format: str | None = typer.Option(None, "--format", "-f", help="Reader; default: detect."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable JSON."),
    scale: float | None = typer.Option(
        None, "--scale", help="Scale token counts by this factor (0-1], keeping prefixes."),
    max_context: int | None = typer.Option(
        None, "--max-context", help="Cap every prompt at its first N tokens."),
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
    if trace.skipped:
        typer.echo(f"warning: skipped {len(trace.skipped)} bad trace file(s):", err=True)
        for line in trace.skipped:
            typer.echo(f"warning: {line}", err=True)
    st = trace_stats(trace)
    if as_json:
        typer.echo(json.dumps(st.to_dict(), indent=2))
    else:
        typer.echo(format_stats(st))


@traces_app.command("convert")
@guarded
def traces_convert(
    source: str = typer.Argument(..., help="Trace file, folder, or dataset id."),
    output: Path = typer.Option(..., "--output", "-o", help="Native parquet file to write."),
    format: str | None = typer.Option(None, "--format", "-f", help="Reader; default: detect."),
    scale: float | None = typer.Option(
        None, "--scale", help="Scale token counts by this factor (0-1], keeping prefixes."),
    max_context: int | None = typer.Option(
        None, "--max-context", help="Cap every prompt at its first N tokens."),
    option: list[str] = typer.Option(
        [], "--option", "-O", help="Reader option KEY=VALUE, e.g. tokenizer=tok.json, seed=3 "
        "(repeatable)."),
) -> None:
    """Write any readable trace in agentbench's native parquet format."""
    from agentbench.traces.readers import native

    trace = _read_transformed(source, format, scale, max_context, option)
    out = native.write(trace, output)
    typer.echo(f"wrote {out} ({len(trace.sessions):,} sessions, {trace.n_requests():,} requests)")


@traces_app.command("synth")
@guarded
def traces_synth(
    profile: str = typer.Option(..., "--profile", "-p",
                                help="Profile: agentx, codex, or a profile YAML file."),
    sessions: int = typer.Option(..., "--sessions", "-n", help="Root sessions to generate."),
    seed: int = typer.Option(0, "--seed", "-s", help="Random seed (0 is a seed)."),
    output: Path = typer.Option(..., "--output", "-o", help="Native parquet file to write."),
) -> None:
    """Synthesize a trace calibrated to a published agentic workload (native parquet)."""
    from agentbench.traces.readers import native
    from agentbench.traces.synth import synthesize

    trace = synthesize(profile, sessions, seed)
    out = native.write(trace, output)
    typer.echo(f"wrote {out} ({len(trace.sessions):,} sessions, {trace.n_requests():,} requests)")


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
    typer.echo(f"fetched {name} into {out}; read it as cache:{name}")


def _reader_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values read as YAML scalars (numbers, booleans, strings)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"expected KEY=VALUE, got {item!r}", field="--option")
        out[key.strip()] = yaml.safe_load(value) if value else ""
    return out


def _read_transformed(source: str, format: str | None, scale: float | None,
                      max_context: int | None, options: list[str] | None = None) -> Any:
    from agentbench.traces import transform
    from agentbench.traces.readers import read_trace

    if source.startswith("synth:"):  # as `run --trace` takes it
        from agentbench.scenario.flags import trace_spec
        from agentbench.traces.synth import synthesize

        spec = trace_spec(source)
        trace = synthesize(spec["profile"], sessions=spec["sessions"], seed=0)
    else:
        trace = read_trace(source, format=format, **_reader_options(options or []))
    if max_context is not None:
        trace = transform.truncate(trace, max_context)
    if scale is not None:
        trace = transform.scale(trace, scale)
    return trace


def _default_trace() -> str:
    from agentbench.scenario.flags import DEFAULT_TRACE

    return DEFAULT_TRACE


@app.command()
@guarded
def run(
    scenario: Path | None = typer.Argument(
        None, help="Scenario YAML file; none: a scenario built from --url, --model and the "
        "other flags."),
    url: str | None = typer.Option(None, "--url", help="Without a scenario file: the "
                                   "OpenAI-compatible server's base URL (with or without /v1)."),
    model: str | None = typer.Option(None, "--model", help="Without a file: model name sent."),
    api: str | None = typer.Option(None, "--api", help="Without a file: chat (default) or "
                                   "completions."),
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
                                       help="Parent folder of run folders (output.dir)."),
    run_id: str | None = typer.Option(None, "--run-id", help="Run folder name (output.run_id)."),
    progress: bool | None = typer.Option(None, "--progress/--no-progress",
                                         help="Progress bar; default: when stderr is a TTY."),
    workers: str = typer.Option("1", "--workers",
                                help="Client processes the lanes are sharded over: a count "
                                     "or 'auto' (from each endpoint's measured stream rate "
                                     "and the lanes, up to one per CPU)."),
) -> None:
    """Replay a scenario against its endpoints, write results/<run-id>/, print a summary.

    Without a scenario file, --url and --model build one (written to run.json).

    A scenario with ``variants`` runs once per variant and compares the runs at the end."""
    from agentbench.replay import run as replay_run
    from agentbench.scenario.loading import expand_variants, load_scenario, parse_set

    sets = [parse_set(item) for item in set_]
    flags: dict[str, Any] = {"api": api, "concurrency": concurrency, "rate": rate,
                             "trace": trace, "duration_s": duration, "max_requests": max_requests}
    if scenario is None:
        from agentbench.scenario.flags import scenario_from_flags

        base = scenario_from_flags(url, model, sets=sets, seed=seed, rules=rules,
                                   unsafe_override=unsafe_override or None, **flags)
    else:
        given = [f"--{k.removesuffix('_s').replace('_', '-')}"
                 for k, v in {"url": url, "model": model, **flags}.items() if v is not None]
        if given:
            raise InputError(f"{', '.join(given)}: only for a run without a scenario file; "
                             f"with {scenario}, use --set KEY.PATH=VALUE (e.g. --set "
                             "endpoints.0.url=http://host:8000)", source="agentbench run")
        extra = [(k, v) for k, v in (("seed", seed), ("rules", rules),
                                     ("unsafe_override", unsafe_override or None))
                 if v is not None]
        base = load_scenario(scenario, labels={"seed": "--seed", "rules": "--rules",
                                               "unsafe_override": "--unsafe-override"},
                             sets=[*sets, *extra])
    if output is not None:
        base.output.dir = str(output)
    if run_id is not None:
        base.output.run_id = run_id
    from agentbench.engines import serving
    from agentbench.metrics import format_summary, summarize
    from agentbench.metrics.format import run_failure, run_invalid, run_warning

    run_dirs: list[Path] = []
    failed: list[str] = []
    invalid: list[str] = []
    traces: dict[str, Any] = {}  # variants that replay the same trace read it once
    for sc in expand_variants(base):
        if len(base.variants) > 1:
            typer.echo(f"== {sc.name}", err=True)
        with serving(sc, scenario) as adopt_run_dir:  # starts/stops the scenario's server

            def started(d: Path, adopt: Any = adopt_run_dir) -> None:
                adopt(d)
                typer.echo(f"results: {d}", err=True)

            key = json.dumps([sc.trace.model_dump(mode="json"), sc.seed])
            if key not in traces:
                from agentbench.replay.runner import load_trace

                try:
                    traces[key] = load_trace(sc)
                except InputError as e:
                    raise e.located(source=str(scenario or "--trace")) from None
                for line in traces[key].skipped:
                    typer.echo(f"warning: skipped bad trace file {line}", err=True)
            res = replay_run(sc, progress=progress, on_start=started, workers=workers,
                             trace=traces[key])
        summary = summarize(res.run_dir)
        typer.echo(format_summary(summary))
        if (auto := res.info.get("workers_auto")) is not None:
            typer.echo(f"workers       {res.info['workers']} (--workers auto: {auto['why']})")
        typer.echo(f"results: {res.run_dir}")
        why = run_failure(summary, sc.fail_on.error_rate)
        warn = run_warning(summary, sc.fail_on.error_rate)
        if warn is not None:
            typer.echo(f"warning: {res.run_dir.name}: {warn}", err=True)
        if why is not None:
            failed.append(f"{res.run_dir.name}: {why}")
        if (bad := run_invalid(summary)) is not None:
            invalid.append(f"{res.run_dir.name}: {bad}")
        run_dirs.append(Path(res.run_dir))
    if len(run_dirs) > 1:
        from agentbench.api import compare

        cmp = compare(*run_dirs, allow=["all"])  # variants differ on purpose
        typer.echo("\n".join(["", "comparison (against the first variant):", *cmp.headlines]))
        typer.echo("report: agentbench report " + " ".join(str(d) for d in run_dirs))
    for line in failed:
        typer.echo(f"failed: {line}", err=True)
    for line in invalid:
        typer.echo(f"invalid: {line}", err=True)
    if failed:
        raise typer.Exit(1)
    if invalid:
        raise typer.Exit(3)


@app.command()
@guarded
def recover(
    runs: list[Path] = typer.Argument(..., help="Results folder(s) of runs cut short."),
) -> None:
    """Finish runs that were cut short (killed, crashed): spooled rows become parquet files
    and run.json says ``killed``. ``load``, ``report`` and ``gate`` do this by themselves."""
    from agentbench.results.reader import recover_if_cut_short

    for d in runs:
        if not d.is_dir():
            raise InputError("results folder not found", source=str(d))
        made = recover_if_cut_short(d)
        typer.echo(f"{d}: " + (f"recovered {', '.join(made)}" if made else "nothing to recover"))


@app.command("serve-sim")
@guarded
def serve_sim(
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    preset: str = typer.Option("h200-llama3-70b", "--preset",
                               help="Timing preset (--list-presets shows them)."),
    instances: int = typer.Option(1, "--instances", min=1, help="Instances behind the router."),
    router: str = typer.Option("round_robin", "--router", help="round_robin, session_affinity "
                               "(X-Session-ID header, else body `user`), least_loaded, "
                               "cache_aware or random."),
    speedup: float = typer.Option(1.0, "--speedup", help="Divide simulated durations by this."),
    max_context_tokens: int | None = typer.Option(
        None, "--max-context-tokens", help="Context window: longer requests get HTTP 400 "
        "with vLLM's 'maximum context length' message."),
    block_size: int = typer.Option(16, "--block-size", help="KV block size in tokens."),
    cache_blocks: int | None = typer.Option(None, "--cache-blocks",
                                            help="GPU KV blocks per instance (default: preset)."),
    cpu_offload_blocks: int = typer.Option(0, "--cpu-offload-blocks",
                                           help="CPU offload tier blocks per instance."),
    shared_tier_blocks: int = typer.Option(0, "--shared-tier-blocks",
                                           help="Shared KV tier capacity in blocks (0: none)."),
    model: str = typer.Option("sim", "--model", help="Model name served."),
    list_presets: bool = typer.Option(False, "--list-presets", help="Print presets and exit."),
) -> None:
    """Run the KV-cache-aware serving simulator (OpenAI API under /v1) until Ctrl-C."""
    import asyncio

    from pydantic import ValidationError

    from agentbench.scenario.model import SimulatedEndpoint

    if list_presets:
        from agentbench.sim.presets import PRESETS

        typer.echo("\n\n".join(p.describe() for p in PRESETS.values()))
        return
    try:
        cfg = SimulatedEndpoint.model_validate({
            "kind": "simulated", "preset": preset, "instances": instances, "router": router,
            "speedup": speedup, "block_size": block_size, "cache_blocks": cache_blocks,
            "cpu_offload_blocks": cpu_offload_blocks, "model": model,
            "max_context_tokens": max_context_tokens,
            "shared_tier": {"capacity_blocks": shared_tier_blocks} if shared_tier_blocks
            else None})
    except ValidationError as e:
        raise InputError("; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}"
                                   for x in e.errors()), source="serve-sim options") from None
    from agentbench.sim.presets import PRESETS

    if preset not in PRESETS:
        raise InputError(f"unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}",
                         source="serve-sim options", field="preset")

    async def serve() -> None:
        from agentbench.sim import start_simulator

        handle = await start_simulator(cfg, host=host, port=port, in_process=True)
        typer.echo(f"serving simulator at {handle.url}/v1 ({instances} x {preset}, "
                   f"router {router}, speedup {speedup:g}); Ctrl-C stops it")
        try:
            await asyncio.Event().wait()
        finally:
            await handle.close()

    asyncio.run(serve())


@app.command()
@guarded
def report(
    runs: list[Path] = typer.Argument(..., help="Results folder(s); several: a comparison."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Output folder; default: "
                                       "the run's folder (one run) or ./report (several)."),
) -> None:
    """Render report.html (self-contained) and report.md for one run or a comparison."""
    from agentbench.report.render import render

    html, md = render(runs, output)
    typer.echo(f"wrote {html} and {md}")


@app.command()
@guarded
def gate(
    baseline: Path = typer.Argument(..., help="Baseline results folder."),
    candidate: Path = typer.Argument(..., help="Candidate results folder."),
    rules: Path | None = typer.Option(None, "--rules", help="Rules YAML; default: built-in."),
    confidence: float | None = typer.Option(None, "--confidence",
                                            help="Confidence level (default 0.95)."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Markdown for a PR "
                                         "comment; default: <candidate>/gate.md."),
    allow: str | None = typer.Option(
        None, "--allow", help="Fingerprint fields that may differ, comma-separated: trace, "
        "filters, transform, load, timing, time_base, endpoint(s)."),
) -> None:
    """Fail (exit 1) when the candidate regresses past a rule with confidence; 2: bad input
    or runs that are not comparable (their fingerprints differ beyond --allow)."""
    from agentbench.report.gate import evaluate, format_markdown, format_table, load_rules
    from agentbench.scenario.fingerprint import parse_allow

    allowed = parse_allow(allow)
    rule_list, opts = load_rules(rules)
    if confidence is not None:
        if not 0.5 <= confidence < 1:
            raise InputError("must be in [0.5, 1)", source="--confidence")
        opts.confidence = confidence
    result = evaluate(baseline, candidate, rule_list, opts, allowed)
    typer.echo(format_table(result))
    md_path = markdown or candidate / "gate.md"
    md_path.write_text(format_markdown(result, str(baseline), str(candidate)))
    typer.echo(f"markdown: {md_path}")
    raise typer.Exit(0 if result.passed else 1)


@app.command()
@guarded
def record(
    out: Path = typer.Option(..., "--output", "-o", help="Trace file to write (.parquet)."),
    upstream: str | None = typer.Option(None, "--upstream",
                                        help="The OpenAI-compatible server to forward to."),
    listen: str = typer.Option("127.0.0.1:8080", "--listen", help="HOST:PORT to serve on."),
    keep_text: bool = typer.Option(False, "--keep-text",
                                   help="Also store prompt and response text."),
    subagents: str = typer.Option("infer", "--subagents",
                                  help="infer (from timing) or off (every session a root)."),
    session_header: str = typer.Option("X-Session-ID", "--session-header",
                                       help="Header naming a call's session."),
    no_user_sessions: bool = typer.Option(False, "--no-user-sessions",
                                          help="Do not group calls by the body's `user`."),
    rebuild: bool = typer.Option(False, "--rebuild",
                                 help="Remake -o from its journal instead of recording."),
) -> None:
    """Record a live agent through an OpenAI-compatible proxy into a native trace
    (docs/record.md)."""
    from agentbench.proxy.proxy import RecordConfig, parse_listen, run_record, summary

    if rebuild:
        from agentbench.proxy import rebuild as rebuild_trace

        rebuild_trace(out)
        typer.echo(summary(out))
        return
    if upstream is None:
        raise InputError("--upstream is required (the server to forward to)", field="upstream")
    if subagents not in ("infer", "off"):
        raise InputError(f"expected infer or off, got {subagents!r}", field="subagents")
    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise InputError(str(e), field="listen") from None
    cfg = RecordConfig(upstream=upstream, out=out, host=host, port=port, keep_text=keep_text,
                       subagents=subagents, session_header=session_header,
                       session_from_user=not no_user_sessions)
    typer.echo(run_record(cfg, typer.echo))


def main() -> None:
    """Console entry point."""
    import asyncio

    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except asyncio.CancelledError:  # SIGTERM during a run: its files are written
        typer.echo("terminated", err=True)
        sys.exit(143)


if __name__ == "__main__":  # pragma: no cover
    main()
