"""``run_experiment``'s arguments, checked before anything runs: each refused in one
``InputError`` naming it (``agentbench run`` names the option typed instead,
``OPTIONS``), and the repeats ``--repeat`` asks for, which a run id or a seed may not
allow."""

from __future__ import annotations

import os
from typing import Any

from agentbench.errors import InputError

#: the most runs of each variant ``--repeat`` makes (each is a run folder, and its summary
#: is kept for the intervals)
MAX_REPEATS = 1000

#: ``run_experiment``'s arguments that are options of ``agentbench run``: its errors name
#: the argument (``repeat``), the command's the option (``--repeat``)
OPTIONS = {"repeat": "--repeat", "workers": "--workers", "ray": "--ray",
           "workers_per_node": "--workers-per-node"}


def check_arguments(*, scenario: Any, scenario_path: Any, listener: Any, progress: Any,
                    workers: Any, executor: Any, traces: Any, ray: Any,
                    workers_per_node: Any, repeat: Any) -> None:
    """``run_experiment``'s arguments, each refused in one ``InputError`` naming it
    (``repeat="2"`` was a bare TypeError, ``progress="no"`` drew a progress bar, and
    ``workers_per_node`` without ``ray`` was dropped without a word), before anything
    runs. A count is an ``int`` (a ``bool`` is not one)."""
    def shown(v: Any) -> str:
        return f"{v!r}"[:60] + f" ({type(v).__name__})"

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    paths = (str, os.PathLike)
    if not (hasattr(scenario, "variants") or isinstance(scenario, paths)):
        raise InputError(f"expected a Scenario or the path of its YAML file, got "
                         f"{shown(scenario)}", field="scenario")
    if scenario_path is not None and not isinstance(scenario_path, paths):
        raise InputError(f"expected the path of the scenario's file, got "
                         f"{shown(scenario_path)}", field="scenario_path")
    if progress is not None and not isinstance(progress, bool):
        raise InputError(f"expected True, False or None, got {shown(progress)}",
                         field="progress")
    if not (workers is None or count(workers) or isinstance(workers, str)):
        raise InputError(f"expected a count of worker processes or 'auto', got "
                         f"{shown(workers)}", field="workers")
    if executor is not None and not callable(executor):
        raise InputError(f"expected an executor factory (a callable), got "
                         f"{shown(executor)}", field="executor")
    if traces is not None and not isinstance(traces, dict):
        raise InputError(f"expected a dict (the traces read, kept across calls), got "
                         f"{shown(traces)}", field="traces")
    if ray is not None and not isinstance(ray, str):
        raise InputError(f"expected a Ray address ('local', 'auto' or host:port), got "
                         f"{shown(ray)}", field="ray")
    if not count(workers_per_node):
        raise InputError(f"expected a count of load workers on each Ray node, got "
                         f"{shown(workers_per_node)}", field="workers_per_node")
    if workers_per_node < 1:
        raise InputError(f"must be at least 1, not {workers_per_node}",
                         field="workers_per_node")
    if not count(repeat):
        raise InputError(f"expected a count of runs of each variant, got {shown(repeat)}",
                         field="repeat")
    if repeat < 1:
        raise InputError(f"must be at least 1, not {repeat}", field="repeat")
    if repeat > MAX_REPEATS:
        raise InputError(f"at most {MAX_REPEATS:,} runs of each variant, not {repeat:,}",
                         field="repeat")
    told = ["variant_started", "run_started", "trace_warning", "variant_done",
            *(["repeated"] if repeat != 1 else [])]
    lacks = [m for m in told if not callable(getattr(listener, m, None))]
    if listener is not None and lacks:
        raise InputError(f"expected a Listener (agentbench.experiment.Listener), got "
                         f"{shown(listener)} without {', '.join(lacks)}", field="listener")
    if ray is None:
        if workers_per_node != 1:
            raise InputError("needs ray (the load workers on each Ray node)",
                             field="workers_per_node")
        return
    if repeat > 1:
        raise InputError("must be 1 on a Ray cluster", field="repeat")
    if workers not in (None, 1, "1") or executor is not None:
        raise InputError("with ray, Ray's actors run the lanes (workers_per_node on each "
                         "node): give no workers or executor",
                         field="workers" if executor is None else "executor")


def check_repeats(sc: Any, n: int) -> None:
    """One line when a repeat of ``sc`` could not be made (``repeat_of``): its run id with
    ``-repNN`` past the run id's 200 characters, or, in virtual time, its seed
    (``seed + i``) past the largest seed."""
    from agentbench.scenario.strict import INT64

    if n == 1:
        return
    rid, last = sc.output.run_id, f"-rep{n:02d}"
    if rid is not None and len(rid) + len(last) > 200:
        raise InputError(f"a repeat's folder is the run id ({len(rid)} characters) and "
                         f"{last}, past the 200 characters a run id may have",
                         field="repeat")
    if sc.clock_mode == "virtual" and sc.seed + n - 1 > INT64:
        raise InputError(f"virtual-time repeats run seeds {sc.seed:,} to {sc.seed + n - 1:,}, "
                         f"past the largest seed ({INT64:,})", field="repeat")
