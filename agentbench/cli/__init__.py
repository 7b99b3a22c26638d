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
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except (asyncio.CancelledError, Terminated):  # SIGTERM: a run's files are written
        typer.echo("terminated", err=True)
        sys.exit(143)

