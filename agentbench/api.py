"""The Python API: ``agentbench.load(run_dir)``, ``agentbench.compare(r1, r2, ...)`` and
``agentbench.run_experiment(scenario)``.

    import agentbench
    r = agentbench.load("results/quickstart-…")
    r.requests          # one row per request, with ttft_ms, tpot_ms, e2e_ms... added
    r.time_base.kind    # "virtual" | "simulated" | "wall": the base of every time column
    r.summary["overall"]["latency"]["ttft_ms"]["p50"]
    c = agentbench.compare(r, agentbench.load("results/other"))
    c.values, c.ratios  # floats: one row per metric, one column per run name
    c.table             # the same, formatted, with changes against the first run
    x = agentbench.run_experiment("scenarios/quickstart.yaml")   # as `agentbench run`
    x.runs[0].summary, x.exit_code
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbench.metrics.run import Run
    from agentbench.report.comparison import Comparison

# the functions import their packages when called, so ``import agentbench`` (and the CLI's
# --help) stays light: pandas and pyarrow load with the first ``load``


def load(run_dir: str | Path, *, refresh: bool = False) -> Run:
    """Open ``results/<run>/`` as a ``Run`` (``agentbench.metrics.run.load``)."""
    from agentbench.metrics.run import load as _load

    return _load(run_dir, refresh=refresh)


def compare(*runs: Run | str | Path, block: str = "overall",
            allow: Iterable[str] = (), labels: Iterable[str] | None = None) -> Comparison:
    """Runs side by side against the first (``agentbench.report.comparison.compare``)."""
    from agentbench.report.comparison import compare as _compare

    return _compare(*runs, block=block, allow=allow, labels=labels)


def run_experiment(scenario: Any, **kwargs: Any) -> Any:
    """Run a scenario (a ``Scenario`` or a path to its YAML file) as ``agentbench run``
    does: every variant, summarized, judged and compared (``agentbench.experiment``)."""
    from agentbench.experiment import run_experiment as _run

    return _run(scenario, **kwargs)


def __getattr__(name: str) -> Any:
    """``Run`` and ``Comparison``, the classes ``load`` and ``compare`` return."""
    if name == "Run":
        from agentbench.metrics.run import Run

        return Run
    if name == "Comparison":
        from agentbench.report.comparison import Comparison

        return Comparison
    raise AttributeError(f"module 'agentbench.api' has no attribute {name!r}")


__all__ = ["Comparison", "Run", "compare", "load", "run_experiment"]
