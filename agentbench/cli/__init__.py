"""The ``agentbench`` command line: parse, validate, call one function, print where results
are. Heavy imports happen inside the commands so ``agentbench --help`` stays instant. Each
module registers its commands on ``app`` (``cli/app.py``), in the order ``--help`` lists
them."""

from __future__ import annotations

import contextlib
import importlib
import sys

import typer

from agentbench.cli.app import app, guarded, traces_app

# each module registers its commands when imported: in the order --help lists them
for _name in ("run", "search", "serve", "results", "record", "traces", "sim"):
    importlib.import_module(f"agentbench.cli.{_name}")

__all__ = ["app", "guarded", "main", "traces_app"]


class Terminated(BaseException):
    """SIGTERM outside a run's own handling (``agentbench.replay.sigterm``, which a run
    sets once its run.json is written): raised where the process is, so what it was
    doing ends through its ``finally`` blocks (a run folder taken but not yet written is
    removed), not by the signal's default action mid-step."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def main() -> None:
    """Console entry point."""
    import asyncio
    import signal

    with contextlib.suppress(ValueError, OSError):  # not the main thread: left as it is
        signal.signal(signal.SIGTERM, _terminate)
    usage_error, click_error = _click_errors()
    try:
        # click's errors come here (standalone_mode=False): a usage error is one line
        code = app(standalone_mode=False)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except (asyncio.CancelledError, Terminated):  # SIGTERM: a run's files are written
        typer.echo("terminated", err=True)
        sys.exit(143)
    except usage_error as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # a group given no command: its help
            e.show()  # type: ignore[attr-defined]
            sys.exit(2)
        ctx = getattr(e, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        text = " ".join(e.format_message().split()).rstrip(".")  # type: ignore[attr-defined]
        typer.echo(f"error: {where}{text} (see --help)", err=True)
        sys.exit(2)
    except click_error as e:
        e.show()  # type: ignore[attr-defined]
        sys.exit(getattr(e, "exit_code", 1))
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    # a command returns None; typer.Exit(N) returns N
    sys.exit(code if type(code) is int else 0)  # not a bool a command might return


def _click_errors() -> tuple[type[Exception], type[Exception]]:
    """click's ``UsageError`` and ``ClickException``, from whichever click typer uses (a
    copy of its own in recent versions, the click package before)."""
    mro = typer.BadParameter.__mro__
    return (next(c for c in mro if c.__name__ == "UsageError"),
            next(c for c in mro if c.__name__ == "ClickException"))

