"""``agentbench search``: the most load that still meets the scenario's SLOs."""

from __future__ import annotations

from pathlib import Path

import typer

from agentbench.cli.app import app, guarded, path_value


def _range(text: str, flag: str) -> tuple[float, float]:
    from agentbench.errors import InputError

    lo, sep, hi = text.partition(":")
    try:
        a, b = float(lo), float(hi if sep else lo)
    except ValueError:
        raise InputError(f"must be LOW:HIGH, got {text!r}", field=flag) from None
    return a, b


def _free_name(folder: Path, name: str) -> Path:
    """``<name>-search.json`` in ``folder``, or ``<name>-search-<k>.json`` with the least
    ``k`` where nothing is (a file, a folder, a link): an earlier search's result is
    never replaced, as a run folder never is (it was, without a word)."""
    import os

    from agentbench.errors import InputError

    for k in range(100_000):
        out = folder / f"{name}-search{f'-{k}' if k else ''}.json"
        if not os.path.lexists(out):
            return out
    raise InputError("100,000 searches of this name are there; pick another -o",
                     source=str(folder))


@app.command()
@guarded
def search(
    scenario: Path = typer.Argument(..., help="Scenario YAML file (its slos are the goal).",
                                    parser=path_value),
    lanes: str | None = typer.Option(None, "--lanes", help="LOW:HIGH lanes to search "
                                     "(a lanes load)."),
    rate: str | None = typer.Option(None, "--rate", help="LOW:HIGH sessions per second to "
                                    "search (a rate load)."),
    goal: str = typer.Option("requests", "--goal", help="requests or agents: whose goodput "
                             "must reach --target."),
    target: float = typer.Option(0.9, "--target", help="Goodput a load must reach (0-1)."),
    max_probes: int = typer.Option(8, "--max-probes", min=1, help="Runs at most."),
    set_: list[str] = typer.Option([], "--set", help="KEY.PATH=VALUE: override a scenario "
                                   "key (repeatable)."),
    output: Path | None = typer.Option(None, "--output", "-o",
                                       help="Parent folder of the probes' run folders.",
                                       parser=path_value),
) -> None:
    """Find the most lanes (or rate) that still meets the scenario's SLOs, by bisection:
    one run per probed load, the frontier printed and written to <output>/<name>-search.json
    (-1, -2, ... beside an earlier one, never replaced), the name as run folders spell it
    (docs/metrics.md, "Capacity search")."""
    from agentbench.errors import InputError, printable
    from agentbench.experiment.search import Probe, SearchResult, format_search, write_search
    from agentbench.experiment.search import search as run_search
    from agentbench.results.rundir import safe_name
    from agentbench.scenario.loading import load_scenario, parse_set

    if (lanes is None) == (rate is None):
        raise InputError("give one of --lanes LOW:HIGH or --rate LOW:HIGH",
                         source="agentbench search")
    sets = [parse_set(item) for item in set_]
    if output is not None:
        sets.append(("output.dir", str(output)))
    sc = load_scenario(scenario, labels={"output.dir": "--output"}, sets=sets)
    want = "lanes" if lanes is not None else "rate"
    if sc.load.kind != want:
        raise InputError(f"--{want} needs a {want} load; the scenario's is {sc.load.kind}",
                         source=str(scenario))
    lo, hi = _range(lanes or rate or "", f"--{want}")

    def told(p: Probe) -> None:
        typer.echo(f"probe {p.load:g}: {'pass' if p.passed else 'FAIL'} ({p.run_dir})",
                   err=True)

    # inside --output whatever the name says (a name '../../x' wrote two folders up), and
    # named before the probes run: never over an earlier search's file (or anything else)
    out = _free_name(Path(sc.output.dir), safe_name(sc.name))

    def tell(res: SearchResult) -> None:
        nonlocal out
        for line in format_search(res):
            typer.echo(line)
        out.parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                write_search(res, out)
                break
            except FileExistsError:  # taken while the probes ran (a search beside it)
                out = _free_name(out.parent, safe_name(sc.name))
        typer.echo(printable(f"search: {out}" + (" (interrupted)" if res.interrupted
                                                 else "")))

    # stopped by Ctrl-C or SIGTERM, the probes that finished are printed and written too
    # (they were lost: each probe may be minutes against a real endpoint), then the stop
    # goes on to its exit code (130, 143)
    tell(run_search(sc, lo=lo, hi=hi, goal=goal, target=target, max_probes=max_probes,
                    scenario_path=scenario, on_probe=told, on_stop=tell))
