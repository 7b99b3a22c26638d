"""The ``agentbench`` command line: parse, validate, call one function, print where results
are. Heavy imports happen inside the commands so ``agentbench --help`` stays instant. Each
module registers its commands on ``app`` (``cli/app.py``), in the order ``--help`` lists
them."""

from __future__ import annotations

import importlib
import sys

import typer

from agentbench.cli.app import app, guarded, traces_app

# each module registers its commands when imported: in the order --help lists them
for _name in ("run", "search", "serve", "results", "record", "traces", "sim"):
    importlib.import_module(f"agentbench.cli.{_name}")

__all__ = ["app", "guarded", "main", "traces_app"]


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

