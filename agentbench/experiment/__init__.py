"""Running an experiment as the CLI does, from Python: a scenario's variants one after
another, each with its trace, its engine (``server:``) and its verdicts
(docs/architecture.md). ``agentbench run`` is a thin wrapper over
:func:`run_experiment`."""

from agentbench.experiment.run import (
    ExperimentResult,
    Listener,
    Quiet,
    VariantRun,
    run_experiment,
    run_variant,
)

__all__ = ["ExperimentResult", "Listener", "Quiet", "VariantRun", "run_experiment",
           "run_variant"]
