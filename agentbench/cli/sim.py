"""``agentbench sim``: the simulator against real runs (``sim check``: how far a preset's
predictions are from a finished run's measurements, figure by figure)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from agentbench.cli.app import app, guarded

sim_app = typer.Typer(help="Check simulator presets against real runs.", no_args_is_help=True)
app.add_typer(sim_app, name="sim")


@sim_app.command("check")
@guarded
def check(
    run: Path = typer.Argument(..., help="Results folder of a finished run (its run.json "
                               "holds the scenario replayed)."),
    preset: str = typer.Option(..., "--preset", help="Simulator preset: a shipped name "
                               "(serve-sim --list-presets) or a preset YAML file."),
    instances: int | None = typer.Option(None, "--instances", min=1,
                                         help="Simulated instances (default: as many as "
                                         "the run had endpoints)."),
    out: Path | None = typer.Option(None, "-o", "--out", help="Folder for the simulated run "
                                    "(default: a new run folder beside RUN)."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
) -> None:
    """Replay RUN's scenario on the simulator with --preset in virtual time and print
    predicted against measured, with each figure's error."""
    from agentbench.experiment.simcheck import format_check, sim_check

    result = sim_check(run, preset, instances=instances, out=out)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        typer.echo(format_check(result))
