"""The command line's application, its error guard (bad input is one line and exit code 2)
and the small commands (``version``, ``validate``, ``docs``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from agentbench.errors import InputError, ResultsWriteError, printable

app = typer.Typer(
    name="agentbench",
    help="Replay agentic coding workloads against OpenAI-compatible endpoints. The docs "
    "that messages name (docs/NAME.md) come with the package: agentbench docs NAME.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's own help: it wraps at the terminal's width, where rich's boxes cut option
    # names and help at 80 columns ("--workers-per-no…")
    rich_markup_mode=None,
)
traces_app = typer.Typer(help="Read, convert, synthesize and analyse traces.",
                         no_args_is_help=True, rich_markup_mode=None)
app.add_typer(traces_app, name="traces")

F = TypeVar("F", bound=Callable[..., Any])


class EmptyPath(type(Path())):  # type: ignore[misc]
    """What ``path_value`` makes of ``''``: the command's guard refuses it in one line."""


def path_value(text: str) -> Path:
    """A path argument or option as given; ``''`` (``Path('')`` is ``.``, so an empty name,
    such as a shell variable never set, would silently mean the working folder) becomes an
    ``EmptyPath`` that ``guarded`` refuses, naming the parameter."""
    return EmptyPath(".") if text == "" else Path(text)


def _refuse_empty_paths(fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """One line naming the option (``--output``) or argument (``RUNS``) given ``''``."""
    import inspect

    for name, value in kwargs.items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, EmptyPath) for v in values):
            info = inspect.signature(fn).parameters[name].default
            decls = [d for d in getattr(info, "param_decls", None) or () if d.startswith("--")]
            raise InputError("empty: give a path (. for the working folder)",
                             field=decls[0] if decls else name.upper())


def distinct_runs(runs: list[Path], why: str) -> list[Path]:
    """The run folders, each once: ``RUN`` and ``RUN/`` (or a link to it, or a copy of its
    folder: run.json's run id, start, process and host the same) given together are one
    run, refused in one line that ends with ``why``."""
    import os

    seen: dict[Any, Path] = {}
    for r in runs:
        for key in (os.path.realpath(r), _identity(r)):
            if key is None:
                continue
            if key in seen:
                first = str(seen[key])
                also = (f" (as {first!r} too)" if isinstance(key, str) else
                        f" (a copy of {first!r}: run id {key[0]})") if first != str(r) else ""
                raise InputError(f"given twice{also}: {why}", source=str(r))
            seen[key] = r
    return runs


def _identity(run: Path) -> tuple[Any, ...] | None:
    """The run a folder holds (``report.comparison.run_identity``), None when its run.json
    is no regular file (a FIFO would block the read) or cannot be read: the command that
    reads the folder says why."""
    import stat

    from agentbench.report.comparison import run_identity
    from agentbench.results import schema as R
    from agentbench.results.runfolder import read_run_json

    try:
        if not stat.S_ISREG((run / R.RUN_FILE).stat().st_mode):
            return None
        return run_identity(read_run_json(run))
    except (OSError, InputError):
        return None


_STATE = {"debug": False}


def _trace_if_debug() -> None:
    """With ``--debug``: the traceback of the error being handled, on stderr, before its
    one line (the exit code stays the one the error has without ``--debug``)."""
    if _STATE["debug"]:
        import traceback

        traceback.print_exc()


def guarded(fn: F) -> F:
    """Bad input becomes one line on stderr and exit code 2 (a traceback with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            _refuse_empty_paths(fn, kwargs)
            return fn(*args, **kwargs)
        except InputError as e:
            _trace_if_debug()
            lines = e.lines() if hasattr(e, "lines") else [e.one_line()]
            for line in lines:  # a file's name or a session id from it may hold anything
                typer.echo(f"error: {printable(line)}", err=True)
            raise typer.Exit(2) from None
        except ResultsWriteError as e:
            _trace_if_debug()
            typer.echo(f"error: {e.one_line()}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:  # Ctrl-C: typer would make it a silent exit 130
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:  # the reader went away (| head): nothing to say to it
            _quiet_stdout()
            raise typer.Exit(1) from None
        except OSError as e:  # a disk that is full or read-only, a file that vanished
            _trace_if_debug()
            where = f"{e.filename}: " if e.filename else ""
            text = " ".join(str(e.strerror or e).split())
            hint = "" if _STATE["debug"] else " (--debug shows where)"
            typer.echo(f"error: {where}{text}{hint}", err=True)
            raise typer.Exit(1) from None
        except (MemoryError, ImportError) as e:  # ulimit -v, a container's memory limit:
            _trace_if_debug()  # pyarrow's ArrowMemoryError is a MemoryError; a library
            # that cannot be mapped in is an ImportError (so is a broken install)
            what = "out of memory" if isinstance(e, MemoryError) else "cannot import a module"
            text = " ".join(str(e).split())
            hint = "" if _STATE["debug"] else " (--debug shows where)"
            typer.echo(printable(f"error: {what}{f' ({text})' if text else ''}{hint}"),
                       err=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _quiet_stdout() -> None:
    """stdout to /dev/null: what is left in its buffer, written again at exit, would raise
    the broken pipe once more (Python's 'Exception ignored' lines on stderr)."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass


def _print_version(value: bool) -> None:
    if value:
        from agentbench import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    _version: bool = typer.Option(False, "--version", callback=_print_version,
                                  is_eager=True, help="Print the version and exit."),
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
    scenario: Path = typer.Argument(..., help="Scenario YAML file.", parser=path_value),
) -> None:
    """Check a scenario and print every problem with its key path."""
    from agentbench.scenario.loading import check_scenario, load_scenario
    from agentbench.sim.presetcheck import check_presets

    sc = load_scenario(scenario)
    check_presets(sc, str(scenario))
    _, warnings = check_scenario(sc, scenario.resolve().parent)
    for w in warnings:
        typer.echo(f"warning: {scenario}: {w}", err=True)
    typer.echo(f"{scenario}: ok ({sc.name})")


#: the package's docs: ``agentbench/docs`` (a link to the repository's ``docs/``, which
#: the wheel holds as files)
DOCS = Path(__file__).resolve().parent.parent / "docs"


@app.command()
@guarded
def docs(
    name: str | None = typer.Argument(None, help="A doc's name: metrics, docs/metrics.md... "
                                      "Without one: the list."),
) -> None:
    """Print one of the docs that messages name (docs/NAME.md), or list them."""
    found = {p.stem: p for p in sorted(DOCS.glob("*.md"))}
    if name is not None and not name.strip():  # '' (a variable never set) is no request
        raise InputError("empty: give a doc's name (agentbench docs lists them)", field="NAME")
    if name is None:
        for stem, p in found.items():
            first = p.read_text(encoding="utf-8").split("\n", 1)[0].lstrip("# ")
            typer.echo(f"{stem:<14} {first}")
        typer.echo(f"(in {DOCS})")
        return
    stem = name.strip().removeprefix("docs/").removesuffix(".md")
    if stem not in found:
        raise InputError(f"no doc {name!r}; the docs: {', '.join(found) or 'none found'}",
                         field="NAME")
    typer.echo(found[stem].read_text(encoding="utf-8"), nl=False)
