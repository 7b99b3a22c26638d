"""``agentbench sim``: the simulator against real runs (``sim check``: how far a preset's
predictions are from a finished run's measurements, figure by figure)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import typer

from agentbench.cli.app import app, distinct_runs, guarded, path_value
from agentbench.traces import MAX_TOKENS

sim_app = typer.Typer(help="Check simulator presets against real runs and fit them.",
                      no_args_is_help=True, rich_markup_mode=None)
app.add_typer(sim_app, name="sim")


@sim_app.command("check")
@guarded
def check(
    run: Path = typer.Argument(..., help="Results folder of a finished run (its run.json "
                               "holds the scenario replayed).", parser=path_value),
    preset: str = typer.Option(..., "--preset", help="Simulator preset: a shipped name "
                               "(serve-sim --list-presets) or a preset YAML file."),
    instances: int | None = typer.Option(None, "--instances", min=1,
                                         help="Simulated instances (default: as many as "
                                         "the run had endpoints)."),
    out: Path | None = typer.Option(None, "-o", "--out", help="Folder for the simulated run "
                                    "(default: a new run folder beside RUN).", parser=path_value),
    block_size: int | None = typer.Option(None, "--block-size", min=1,
                                          help="Simulated KV block, tokens (default: the "
                                          "engine's where the run says it, else 16)."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
) -> None:
    """Replay RUN's scenario on the simulator with --preset in virtual time and print
    predicted against measured, with each figure's error."""
    from agentbench.experiment.simcheck import format_check, sim_check

    result = sim_check(run, preset, instances=instances, out=out, block_size=block_size)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        typer.echo(format_check(result))


@sim_app.command("fit")
@guarded
def fit(
    runs: list[Path] = typer.Argument(None, help="Results folders of finished runs against "
                                      "the engine to fit (wall-clock runs with usage).",
                                      parser=path_value),
    out: Path = typer.Option(..., "-o", "--out", help="Preset YAML file to write.",
                             parser=path_value),
    name: str | None = typer.Option(None, "--name", help="Preset name (default: the "
                                    "file's stem)."),
    engine: str | None = typer.Option(None, "--engine", help="Engine name for the "
                                      "provenance (default: as the runs' server command "
                                      "says: vllm, llama.cpp)."),
    engine_version: str | None = typer.Option(None, "--engine-version"),
    model: str = typer.Option("unknown model", "--model", help="Model, with precision."),
    hardware: str = typer.Option("unknown hardware", "--hardware"),
    scheduler: str | None = typer.Option(None, "--scheduler", help="paged or slots "
                                         "(default: slots for llama.cpp, else paged)."),
    # at most what a preset file holds (2**40): past it the fit ran, then the preset it
    # made was refused naming a line of a file never written
    kv_capacity_tokens: int | None = typer.Option(None, "--kv-capacity-tokens", min=1,
                                                  max=1 << 40,
                                                  help="The engine's KV capacity, in its "
                                                  "own tokens (default: as the runs say)."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", min=1, max=1 << 40),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens",
                                                      min=1, max=1 << 40),
    max_context_tokens: int | None = typer.Option(
        None, "--max-context-tokens", min=1, max=1 << 40, help="The context window the "
        "engine refuses a longer request beyond (vLLM's --max-model-len), in its own "
        "tokens (default: as the runs' server command says; else none)."),
    no_ram_cache: bool = typer.Option(False, "--no-ram-cache", help="The engine keeps no "
                                      "host-RAM prompt cache (llama-server --cache-ram 0; "
                                      "default: as the runs' server command says)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
    endpoint: str | None = typer.Option(None, "--endpoint", help="Profile this running "
                                        "OpenAI-compatible endpoint first (a grid of "
                                        "prefill and decode requests, a few minutes) and "
                                        "fit on its runs too."),
    served_model: str = typer.Option("default", "--served-model", help="Model name the "
                                     "--endpoint serves."),
    api: str = typer.Option("chat", "--api", help="chat, completions, responses or messages "
                           "(--endpoint)."),
    max_context: int = typer.Option(4096, "--max-context", min=256, max=MAX_TOKENS,
                                    help="The grid's longest prompt plus output, tokens "
                                    f"(--endpoint; at most {MAX_TOKENS:,})."),
    grid_out: Path | None = typer.Option(None, "--grid-out", help="Folder for the grid's "
                                         "runs (default: beside --out).", parser=path_value),
    header: list[str] = typer.Option(None, "--header", help="'Name: value' sent with "
                                     "every grid request (repeatable; ${ENV} expands as in "
                                     "a scenario)."),
) -> None:
    """Fit the simulator's step-time model to RUNS and/or a profile of --endpoint
    (non-negative least squares on each request's first-token and decode windows) and
    write it as a preset file, with the engine's capacity and limits and the fit's
    residuals (docs/simulator.md)."""
    from agentbench.errors import InputError, printable
    from agentbench.experiment.fitpreset import save_warning
    from agentbench.experiment.simfit import format_fit

    _check_preset_options(out, force, name, scheduler, {
        "--engine": engine, "--engine-version": engine_version, "--model": model,
        "--hardware": hardware})
    dirs = [str(r) for r in distinct_runs(runs or [], "each run counts once in a fit")]
    if endpoint is None and not dirs:
        raise InputError("name run folders to fit on, or --endpoint to profile")
    headers = _grid_headers(api, header)
    grid: Path | None = None
    if endpoint is not None:
        grid = grid_out or out.with_name(out.stem + "-grid")
        dirs += _profile(endpoint, served_model, grid, api, max_context, headers)
    result, preset = _fit_preset(
        dirs, out, grid, no_ram_cache, name=name or out.stem, engine=engine,
        engine_version=engine_version, model=model, hardware=hardware, scheduler=scheduler,
        kv_capacity_tokens=kv_capacity_tokens, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, max_context_tokens=max_context_tokens)
    _write_preset(out, preset)
    typer.echo(format_fit(result))
    if (warn := save_warning(result, preset.scheduler)) is not None:
        typer.echo(f"warning: {warn}", err=True)
    typer.echo(printable(f"wrote {out}; check it on held-out work: agentbench sim check "
                         f"RUN --preset {shlex.quote(str(out))}"))


def _check_preset_options(out: Path, force: bool, name: str | None, scheduler: str | None,
                          texts: dict[str, str | None]) -> None:
    """What the preset file will hold, checked before minutes of work: ``--scheduler``,
    ``--out``, the preset's name and its provenance ``texts`` (by flag); one line each."""
    from agentbench.errors import InputError

    if scheduler not in (None, "paged", "slots"):
        raise InputError("must be paged or slots", field="--scheduler")
    _check_out(out, force)
    _check_name(name or out.stem, "--name" if name else "--out")
    for flag, text in texts.items():
        _check_line(text, flag)


def _grid_headers(api: str, header: list[str] | None) -> dict[str, str]:
    """The grid's request options: ``--api`` checked, ``--header``'s 'Name: value' items
    read into headers."""
    from agentbench.errors import InputError
    from agentbench.transport.apis import APIS

    if api not in APIS:
        raise InputError(f"must be one of {', '.join(APIS)}", field="--api")
    headers = {}
    for h in header or []:
        k, sep, v = h.partition(":")
        if not sep or not k.strip():
            raise InputError(f"expected 'Name: value', got {h[:40]!r}", field="--header")
        headers[k.strip()] = v.strip()
    return headers


def _profile(endpoint: str, served_model: str, where: Path, api: str, max_context: int,
             headers: dict[str, str]) -> list[str]:
    """``--endpoint`` profiled: the grid of prefill and decode requests run against it,
    its run folders in ``where``."""
    from agentbench.experiment.simgrid import run_grid
    from agentbench.scenario.secrets import url_userinfo, without_query

    shown = without_query(url_userinfo(endpoint)[0])  # no password, no query keys
    return [str(d) for d in run_grid(
        endpoint, served_model, where, api=api, max_context=max_context, headers=headers,
        on_start=lambda: typer.echo(f"profiling {shown}: grid runs in {where}", err=True))]


def _fit_preset(dirs: list[str], out: Path, grid: Path | None, no_ram_cache: bool,
                **options: Any) -> tuple[Any, Any]:
    """The fit of the runs in ``dirs`` and the preset it makes (``options``:
    ``fitted_preset``'s); where the fit fails after ``--endpoint``'s grid (in ``grid``),
    the line says how to fit the grid's runs again."""
    from agentbench.errors import InputError
    from agentbench.experiment.fitpreset import fitted_preset
    from agentbench.experiment.simfit import fit_runs

    try:
        result = fit_runs(dirs)
        if no_ram_cache:
            result.facts.ram_cache_tokens = 0
            result.facts.sources["ram_cache_tokens"] = "set by sim fit's --no-ram-cache"
        preset = fitted_preset(result, **options)
    except InputError as e:
        if grid is None:
            raise
        raise InputError(e.one_line() + f" (the grid's runs are kept: fit them again with "
                         f"`agentbench sim fit {shlex.quote(str(grid))}/grid-*/ -o "
                         f"{shlex.quote(str(out))}` and the options "
                         "they need)") from None
    return result, preset


def _write_preset(out: Path, preset: Any) -> None:
    """The preset's YAML into ``out``, once it reads back as a preset file."""
    from agentbench.sim.presetfile import parse_preset, preset_yaml

    text = preset_yaml(preset)
    parse_preset(text, str(out))  # what is written reads back
    _write(out, text)


def _check_out(out: Path, force: bool) -> None:
    """``--out`` names a preset file that ``sim check --preset`` reads back: a ``.yaml`` or
    ``.yml`` name, not a folder, and never anything but a regular file (``--force`` over
    ``/dev/null`` replaced the device with a file); one line each."""
    import os
    import stat

    from agentbench.errors import InputError
    from agentbench.traces.output import check_folder

    try:
        mode: int | None = os.lstat(out).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:  # a name too long, a path through a file
        raise InputError(f"cannot write there ({e.strerror})", source=str(out),
                         field="--out") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise InputError("is a folder: --out names the preset file to write",
                         source=str(out), field="--out")
    if out.suffix.lower() not in (".yaml", ".yml"):
        raise InputError("a preset file's name ends in .yaml or .yml (as `sim check "
                         "--preset` reads it)", source=str(out), field="--out")
    if mode is not None and not stat.S_ISREG(mode):
        raise InputError("not a regular file (a device, FIFO or link): --out names the "
                         "preset file to write", source=str(out), field="--out")
    if mode is not None and not force:
        raise InputError("exists; pass --force to replace it", source=str(out))
    check_folder(out, "--out")  # a folder that takes it, before minutes of fit or profile


def _check_name(name: str, field: str) -> None:
    """The preset's name as its file will hold it, checked before the fit."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from agentbench.errors import InputError
    from agentbench.sim.presetfile import PresetFile

    try:
        TypeAdapter(Annotated[str, PresetFile.model_fields["name"]]).validate_python(name)
    except ValidationError as e:
        why = e.errors()[0]["msg"]
        raise InputError(f"not a preset name: {why} (the name is --name, else the file's "
                         f"stem)", source=repr(name)[:80], field=field) from None


def _check_line(text: str | None, flag: str) -> None:
    """A provenance text of the preset, checked before the fit as its file will be."""
    from agentbench.errors import InputError
    from agentbench.scenario.strict import one_printable_line

    try:
        one_printable_line(text or "")
    except ValueError as e:
        raise InputError(str(e), field=flag) from None


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all; a failure is one InputError line. Its
    folder is made, as ``run -o``'s and ``search -o``'s are (the docs' ``-o
    presets/my-engine.yaml`` failed after the fit where no ``presets/`` was)."""
    import contextlib
    import os

    from agentbench.errors import InputError

    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise InputError(f"cannot write ({e.strerror or e})", source=str(path)) from None
