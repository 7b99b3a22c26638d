"""Real engines under test: launching a scenario's ``server:`` process around a run
(``server.py``), locating or building llama.cpp's ``llama-server`` and the vLLM CPU
install (``locate.py``), and tiny random-weight models for them (``models.py``).
``python -m agentbench.engines --help`` lists the command-line helpers."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def serving(scenario: Any, scenario_path: Path | None = None
            ) -> Iterator[Callable[[Path], None]]:
    """Start ``scenario.server`` (when there is one) and wait for health; yield the hook
    that takes the run folder once it exists; stop the server on the way out."""
    if scenario.server is None:
        yield lambda _d: None
        return
    from agentbench.engines.server import managed_server

    base = scenario_path.resolve().parent if scenario_path else Path.cwd()
    print(f"server: starting {scenario.server.health_url}", file=sys.stderr)
    from agentbench.scenario.secrets import secrets_of

    secrets = tuple(v for e in scenario.endpoints for v in secrets_of(e))
    with managed_server(scenario.server, base, Path(scenario.output.dir),
                        secrets=secrets) as run:
        print(f"server: healthy after {run.info['startup_s']:.1f} s (pid {run.info['pid']})",
              file=sys.stderr)
        yield run.adopt
    print(f"server: stopped, exit status {run.info.get('exit_status')}", file=sys.stderr)
