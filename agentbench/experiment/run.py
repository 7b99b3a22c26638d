"""``run_experiment``: every variant of a scenario replayed, summarized and judged.

For each variant (``variants:``; one run without them): read its trace (variants that
replay the same trace and seed share one read), start the scenario's engine when it has
a ``server:``, replay it (``agentbench.replay``: virtual time for simulated endpoints),
summarize the run folder (``agentbench.metrics``) and judge it: failed (no measured
request succeeded, the error rate passed ``fail_on.error_rate``, or every endpoint became
unreachable and the run stopped early: run.json ``stopped_reason``), a warning (many
errors without a bound), invalid under ``rules``. Runs of several variants are compared
at the end. What happens is told to a :class:`Listener` (the CLI prints it); the result
says everything the CLI's exit code needs.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentbench.errors import InputError
from agentbench.experiment.arguments import check_arguments, check_repeats
from agentbench.traces.model import Trace


@dataclass
class VariantRun:
    """One variant's run: where it went, what run.json and summary.json say, and its
    verdicts (None: none to give)."""

    scenario: Any
    run_dir: Path
    info: dict[str, Any]
    summary: dict[str, Any]
    failure: str | None = None
    warning: str | None = None
    invalid: str | None = None
    #: the Ray node that ran it (``run_experiment(..., ray=...)``), else None
    node: str | None = None


@dataclass
class ExperimentResult:
    """Every variant's run, and their comparison (several variants)."""

    runs: list[VariantRun] = field(default_factory=list)
    comparison: Any = None  # agentbench.report.comparison.Comparison
    #: when the variants replay different traces (``trace.profile`` set per variant) and
    #: some share one: a comparison per trace shared, each against the first variant
    #: replaying it, and one of the first variant of each trace (``by_trace``)
    by_trace: list[Any] = field(default_factory=list)
    across_traces: Any = None
    #: then too: the variants (their indices, in sweep order) replaying each trace
    trace_groups: list[list[int]] = field(default_factory=list)
    #: variant name -> its figures over ``repeat`` runs (``metrics.repeats.repeat_table``)
    repeats: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [f"{r.run_dir.name}: {r.failure}" for r in self.runs if r.failure]

    @property
    def invalid(self) -> list[str]:
        return [f"{r.run_dir.name}: {r.invalid}" for r in self.runs if r.invalid]

    @property
    def exit_code(self) -> int:
        """``agentbench run``'s: 1 when a run failed, 3 when one is not valid, else 0."""
        return 1 if self.failed else 3 if self.invalid else 0


class Listener(Protocol):
    """What an experiment tells as it goes (the CLI prints it: ``agentbench.cli.run``)."""

    def variant_started(self, scenario: Any, of: int) -> None:
        """A variant starts (``of``: how many the experiment has)."""

    def run_started(self, run_dir: Path) -> None:
        """The variant's run goes ahead in this folder (its endpoints answered); not told
        of a variant run as a Ray task, whose folder ``variant_done`` gives."""

    def trace_warning(self, line: str) -> None:
        """A trace file was skipped."""

    def variant_done(self, run: VariantRun) -> None:
        """The variant's run is summarized and judged."""

    def compared(self, result: ExperimentResult) -> None:
        """Several variants ran and were compared."""

    def repeated(self, name: str, table: dict[str, Any]) -> None:
        """A variant ran ``--repeat`` times: its figures over the runs, with intervals."""

    def repeats_stopped(self, name: str, finished: int, of: int,
                        table: dict[str, Any] | None) -> None:
        """A variant's repeats were stopped (Ctrl-C, SIGTERM, an error) after ``finished``
        of ``of`` runs: its figures over those (``table``; None under two runs), told
        before the stop goes on. Optional: a listener without it is not told."""


class Quiet:
    """A listener that tells nothing (the library's default)."""

    def variant_started(self, scenario: Any, of: int) -> None:
        return None

    def run_started(self, run_dir: Path) -> None:
        return None

    def trace_warning(self, line: str) -> None:
        return None

    def variant_done(self, run: VariantRun) -> None:
        return None

    def compared(self, result: ExperimentResult) -> None:
        return None

    def repeated(self, name: str, table: dict[str, Any]) -> None:
        return None

    def repeats_stopped(self, name: str, finished: int, of: int,
                        table: dict[str, Any] | None) -> None:
        return None


def run_experiment(scenario: Any, *, scenario_path: Path | None = None,
                   listener: Listener | None = None, progress: bool | None = False,
                   workers: int | str | None = 1, executor: Any = None,
                   traces: dict[str, Trace] | None = None,
                   ray: str | None = None, workers_per_node: int = 1,
                   repeat: int = 1) -> ExperimentResult:
    """Run every variant of ``scenario`` (a validated ``Scenario``, or a path to its YAML
    file) one after another and compare them; return their runs and verdicts.

    ``workers`` and ``executor`` choose what runs the lanes of each run
    (``agentbench.replay.run_scenario``); ``traces`` (optional) caches traces across
    calls by trace spec and seed. ``ray``: the address of a Ray cluster (``local`` starts
    one here): variants in virtual time run there side by side as tasks, each as it would
    here; a variant that measures an endpoint has its lanes on Ray actors,
    ``workers_per_node`` on each node (``agentbench.experiment.raysweep``).
    ``repeat``: run each variant that many times (``repeat_of``) and give its figures
    over the runs with 95% intervals (``result.repeats``); the comparison then takes each
    variant's first run."""
    from agentbench.scenario.loading import expand_variants, load_scenario

    check_arguments(scenario=scenario, scenario_path=scenario_path, listener=listener,
                    progress=progress, workers=workers, executor=executor, traces=traces,
                    ray=ray, workers_per_node=workers_per_node, repeat=repeat)
    if scenario_path is not None:
        scenario_path = Path(scenario_path)
    if not hasattr(scenario, "variants"):
        scenario_path = Path(scenario)
        scenario = load_scenario(scenario_path)
    tell = listener or Quiet()
    traces = {} if traces is None else traces
    result = ExperimentResult()
    from agentbench.sim.presetcheck import check_presets

    check_presets(scenario, str(scenario_path or "the scenario"))
    if ray is not None:
        from agentbench.experiment.raysweep import run_remote

        result.runs = run_remote(expand_variants(scenario), ray, scenario_path, tell,
                                 len(scenario.variants), workers_per_node, progress, traces)
    firsts: list[VariantRun] = [] if ray is None else result.runs
    variants = expand_variants(scenario) if ray is None else []
    for sc in variants:  # before the first run, not in the middle of a sweep
        check_repeats(sc, repeat)
    plan = [(sc, [(r, _trace_key(r)) for r in (repeat_of(sc, i, repeat)
                                                for i in range(repeat))])
            for sc in variants]
    # the runs that replay each trace: those of one trace share its prompts, which go with
    # its last run
    uses = Counter(key for _, reps in plan for _, key in reps)
    for sc, reps in plan:
        tell.variant_started(sc, len(scenario.variants))
        runs: list[VariantRun] = []
        try:
            for r, key in reps:
                runs.append(run_variant(r, scenario_path=scenario_path, listener=tell,
                                        progress=progress, workers=workers,
                                        executor=executor, traces=traces,
                                        shared=uses[key] > 1))
                uses[key] -= 1
                if not uses[key] and key in traces:
                    traces[key].memo.pop("prompts", None)
        except BaseException:  # Ctrl-C, SIGTERM, an error: the repeats that finished
            if repeat > 1:     # are told first (they were lost, minutes of runs each)
                _repeats_stopped(tell, sc.name, runs, repeat)
            raise
        result.runs += runs
        firsts.append(runs[0])
        if repeat > 1:
            from agentbench.metrics.repeats import repeat_table

            result.repeats[sc.name] = repeat_table([r.summary for r in runs])
            tell.repeated(sc.name, result.repeats[sc.name])
    if len(firsts) > 1:
        from agentbench.report.comparison import compare

        # variants differ on purpose
        result.comparison = compare(*[r.run_dir for r in firsts], allow=["all"])
        by_trace(result, firsts)
        tell.compared(result)
    return result


def by_trace(result: ExperimentResult, firsts: list[VariantRun]) -> None:
    """Fill ``result.by_trace`` and ``across_traces`` when the variants replay more than
    one trace and at least two replay the same one. A change against a variant that
    replayed other requests (``pd-ratio.yaml``: AgentX-profile splits against the
    Codex-profile aggregated cluster, "167x higher") is the workload's as much as the
    serving's; against the first variant of its own trace, it is the serving's."""
    from agentbench.report.compare import run_labels
    from agentbench.report.comparison import compare
    from agentbench.scenario.fingerprint import trace_groups

    groups = trace_groups([r.info for r in firsts])
    if len(groups) < 2 or all(len(g) < 2 for g in groups):
        return
    result.trace_groups = groups
    # each run named as in the whole sweep's comparison (``codex-p2d6``), not within its
    # group (``p2d6``, which two groups would share)
    names = dict(zip((r.run_dir for r in firsts), run_labels([r.summary for r in firsts]),
                     strict=True))
    for g in [g for g in groups if len(g) > 1] + [[g[0] for g in groups]]:
        result.by_trace.append(compare(*[firsts[i].run_dir for i in g], allow=["all"],
                                       labels=[names[firsts[i].run_dir] for i in g]))
    result.across_traces = result.by_trace.pop()


def _repeats_stopped(tell: Listener, name: str, runs: list[VariantRun], of: int) -> None:
    """Tell ``tell`` the figures over the repeats that finished before a stop (none under
    two runs), if it listens for them; a listener that fails at it (a closed stdout) does
    not hide the stop."""
    from agentbench.metrics.repeats import repeat_table

    told = getattr(tell, "repeats_stopped", None)
    if not callable(told):
        return
    with contextlib.suppress(Exception):  # the stop itself is what goes on
        told(name, len(runs), of,
             repeat_table([r.summary for r in runs]) if len(runs) >= 2 else None)


def repeat_of(sc: Any, i: int, n: int) -> Any:
    """Run ``i`` of ``n`` repeats of variant ``sc``: named ``<name>-repNN`` (its folder
    ``<run-id>-repNN`` when a run id is set); on the wall
    clock the same seed (the same workload: the spread is the system's run-to-run noise),
    in virtual time seed + i (the same seed would give the same run: the spread is then
    the workload's)."""
    if n == 1:
        return sc
    out = sc.model_copy(deep=True)
    out.name = f"{sc.name}-rep{i + 1:02d}"
    # a run id given (--run-id) names every repeat's folder: <run-id>-repNN
    out.output.run_id = None if sc.output.run_id is None else \
        f"{sc.output.run_id}-rep{i + 1:02d}"
    if sc.clock_mode == "virtual":
        out.seed = sc.seed + i
    return out


def run_variant(sc: Any, *, scenario_path: Path | None = None,
                listener: Listener | None = None, progress: bool | None = False,
                workers: int | str | None = 1, executor: Any = None,
                traces: dict[str, Trace] | None = None, shared: bool = False) -> VariantRun:
    """One variant (a scenario without ``variants``): trace, engine, replay, summary,
    verdicts. A function of its arguments alone, so another process or host can run it.
    ``shared``: other runs (variants, repeats) replay its trace (from ``traces``) after it,
    and take its prompts (``prompts.memo``)."""
    from agentbench.engines import serving
    from agentbench.metrics import summarize
    from agentbench.replay import run as replay_run

    tell = listener or Quiet()
    traces = {} if traces is None else traces
    with serving(sc, scenario_path) as adopt_run_dir:  # starts/stops the scenario's server

        trace = _trace_of(sc, scenario_path, traces, tell, shared)
        # a started engine's log goes into the run folder at once (kept with a run the
        # pre-run check refuses); the listener hears of the folder once the run goes ahead
        res = replay_run(sc, progress=progress, on_start=adopt_run_dir,
                         on_open=tell.run_started, workers=workers, trace=trace,
                         executor=executor)
    summary = summarize(res.run_dir)
    return _judged(VariantRun(sc, Path(res.run_dir), res.info, summary), tell)


def _trace_of(sc: Any, scenario_path: Path | None, traces: dict[str, Trace],
              tell: Listener, shared: bool = False) -> Trace:
    """The variant's trace, read once per trace spec and seed; ``shared``: other runs
    replay it too."""
    from agentbench.replay.runsetup import load_trace, share_prompts
    from agentbench.scenario.fingerprint import trace_hash
    from agentbench.traces.stats import Potential

    key = _trace_key(sc)
    if key not in traces:
        try:
            traces[key] = trace = load_trace(sc)
        except InputError as e:
            raise e.located(source=str(scenario_path or "--trace")) from None
        # figures every variant needs of the trace, made once for all of them (this cache
        # owns the trace and never changes it): its hash for the fingerprint, and the
        # potential cached tokens, computed a hash scope at a time as variants ask
        trace.memo["hash"] = trace_hash(trace)
        trace.memo["potential"] = Potential(trace.sessions)
        for line in traces[key].skipped:
            tell.trace_warning(line)
    if shared:  # other runs replay it too: their prompts are made once
        share_prompts(traces[key])
    return traces[key]


def _trace_key(sc: Any) -> str:
    """What makes two runs' traces the same: the trace spec and the seed."""
    return json.dumps([sc.trace.model_dump(mode="json"), sc.seed])


def _judged(run: VariantRun, tell: Listener) -> VariantRun:
    """The run's verdicts (``agentbench.metrics.format``), told to the listener."""
    from agentbench.metrics.format import run_failure, run_invalid, run_warning

    bound = run.scenario.fail_on.error_rate
    run.failure = run_failure(run.summary, bound)
    run.warning = run_warning(run.summary, bound)
    stopped = run.info.get("stopped_reason")  # every endpoint unreachable: cut short
    if stopped:
        run.failure = stopped + (f"; {run.failure}" if run.failure else "")
        run.warning = None
    run.invalid = run_invalid(run.summary)
    tell.variant_done(run)
    return run
