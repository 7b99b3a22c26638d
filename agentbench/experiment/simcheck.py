"""How far to trust a simulator preset on one's own workload (issue #23): replay a finished
run's scenario on the embedded simulator with a preset, in virtual time, and set every
predicted figure beside the measured one with its error (``agentbench sim check``).

The simulated scenario is the run's own (run.json) with its endpoints replaced by one
``kind: simulated`` endpoint (the preset; as many instances as the run had endpoints; the
run's ``routing`` as the simulator's router; api and model kept; ``ignore_eos``), on
``clock: virtual``, without ``server:``; trace, load, timing, limits, seed, warmup, SLOs and
rules stay as run. A run that was itself simulated is allowed: the check then sets one
preset against another."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.experiment.simcompare import (  # noqa: F401 - the table's names, re-exported
    OK_ROW,
    ROWS,
    CheckRow,
    compare_figures,
    figures,
    request_errors,
    token_ratio,
)
from agentbench.scenario.endpoints import is_simulated


@dataclass
class SimCheck:
    """The result of :func:`sim_check`: the table, both run folders and what was checked."""

    run_dir: Path
    sim_dir: Path
    preset: str
    provenance: dict[str, Any]
    instances: int
    measured_time_base: str
    block_size: int = 16
    rows: list[CheckRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: request by request (the same session, copy and turn in both runs): median and p90
    #: of |predicted / measured - 1| of TTFT and E2E, of |predicted - measured| cached
    #: share in points, and the requests matched
    per_request: dict[str, float] = field(default_factory=dict)

    def row(self, metric: str) -> CheckRow:
        return next(r for r in self.rows if r.metric == metric)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["run_dir"], d["sim_dir"] = str(self.run_dir), str(self.sim_dir)
        return d


def simulated_scenario(scenario: dict[str, Any], preset: str, *, instances: int | None = None,
                       out: Path | None = None, default_dir: Path | None = None,
                       source: str = "run.json", block_size: int | None = None,
                       labels: dict[str, str] | None = None) -> Any:
    """The validated ``Scenario`` that replays ``scenario`` (a run's run.json ``scenario``)
    on the simulator with ``preset`` in virtual time (see the module's docstring); results
    in ``out`` (a run folder) or, by default, a new run folder under ``default_dir``.
    ``labels``: the option each key came from (``{"endpoints.0.instances": "--instances"}``),
    which a problem with its value names instead of the key."""
    from agentbench.scenario.loading import validate_data

    data = {k: v for k, v in scenario.items() if k not in ("server", "variants", "clock")}
    eps = [e for e in scenario.get("endpoints") or [] if isinstance(e, dict)]
    if not eps:
        raise InputError("the run's scenario names no endpoints", source=source)
    n = instances if instances is not None else sum(
        int(e.get("instances") or 1) if is_simulated(e) else 1 for e in eps)
    first = eps[0]
    data["name"] = f"{scenario.get('name') or 'run'}-simcheck"
    data["endpoints"] = [{
        "kind": "simulated", "name": "sim", "preset": preset, "instances": n,
        "router": scenario.get("routing") or "round_robin",
        "api": first.get("api") or "chat", "model": first.get("model") or "sim",
        **({k: first[k] for k in ("block_size", "max_context_tokens")
            if is_simulated(first) and first.get(k) is not None}),
    }]
    if block_size is not None:
        data["endpoints"][0]["block_size"] = block_size
    data["clock"] = "virtual"
    if out is not None:
        data["output"] = {"dir": str(out.parent), "run_id": out.name}
    else:
        data["output"] = {"dir": str(default_dir or Path("results")), "run_id": None}
    return validate_data(data, source, labels=labels)


def _check_out(out: Path) -> None:
    """``--out`` is the simulated run's folder: its last part is the run id."""
    from pydantic import ValidationError

    from agentbench.scenario.model import Output

    try:
        Output(run_id=out.name)
    except ValidationError:
        raise InputError(f"the run folder's name {out.name!r} must be a plain name of at most "
                         "200 characters: letters, digits and _ . = + - (not starting with "
                         "'.')", source=str(out), field="--out") from None


def _trace_readable(scenario: dict[str, Any], source: str) -> None:
    tr = scenario.get("trace") or {}
    src = str(tr.get("source") or "")
    if tr.get("kind", "file") == "file" and src.startswith("/") and not Path(src).exists():
        raise InputError(f"the run's trace {src} is not readable here (sim check replays "
                         "the same trace)", source=source, field="trace.source")


def _preset_info(preset: str) -> tuple[str, dict[str, Any]]:
    """(the preset as the scenario names it, its provenance), or one InputError line."""
    from agentbench.scenario.endpoints import is_preset_path
    from agentbench.sim.presets import get_preset

    ref = str(Path(preset).resolve()) if is_preset_path(preset) else preset
    try:
        p = get_preset(ref)
    except KeyError as e:
        raise InputError(str(e.args[0]), field="--preset") from None
    prov = p.provenance
    return ref, {"name": p.name, "summary": p.summary, "engine": prov.engine,
                 "engine_version": prov.engine_version, "model": prov.model,
                 "hardware": prov.hardware, "date": prov.date, "scheduler": p.scheduler}


def sim_check(run_dir: str | Path, preset: str, *, instances: int | None = None,
              out: str | Path | None = None, workers: int | str | None = 1,
              block_size: int | None = None) -> SimCheck:
    """Replay the finished run ``run_dir``'s scenario on the simulator with ``preset`` (a
    shipped name or a preset YAML file) in virtual time, quietly, and compare: each row
    holds the measured figure, the predicted one and the error. ``instances``: simulated
    instances (default: the run's endpoint count); ``out``: the simulated run's folder
    (default: a new run folder beside ``run_dir``); ``block_size``: the simulated KV block
    (default: the engine's, where the run says it: vLLM's ``cache_config_info`` or
    ``--block-size``, 1 for llama.cpp, which reuses token by token; else the simulator's
    default). Bad input: one ``InputError``."""
    from agentbench.experiment.run import run_experiment
    from agentbench.metrics.run import load

    rd = Path(run_dir)
    run = load(rd)  # InputError when not a results folder
    source = str(rd / "run.json")
    scenario = run.scenario
    if not scenario:
        raise InputError("run.json holds no scenario (not a finished agentbench run)",
                         source=source)
    if instances is not None and instances < 1:
        raise InputError("must be 1 or more", field="--instances")
    if block_size is not None and block_size < 1:
        raise InputError("must be 1 or more", field="--block-size")
    if out is not None:
        _check_out(Path(out))
    ref, prov = _preset_info(preset)
    _trace_readable(scenario, source)
    ok = ((run.summary.get("overall") or {}).get("requests") or {}).get("ok")
    if not ok:
        raise InputError("no successful request in the run: nothing to compare",
                         source=str(rd))
    # a value out of bounds names the option that gave it, not run.json's key
    labels = {k: flag for k, flag, given in (
        ("endpoints.0.instances", "--instances", instances),
        ("endpoints.0.block_size", "--block-size", block_size),
        ("output.dir", "--out", out), ("output.run_id", "--out", out)) if given is not None}
    if block_size is None:
        from agentbench.experiment.enginefacts import engine_facts

        block_size = engine_facts(scenario, run.server_metrics).block_size
        if block_size is None and prov["scheduler"] == "slots":
            block_size = 1  # a llama.cpp-style preset: its engine reuses token by token
    sc = simulated_scenario(scenario, ref, instances=instances,
                            out=Path(out) if out is not None else None,
                            default_dir=rd.resolve().parent, source=source,
                            block_size=block_size, labels=labels)
    res = run_experiment(sc, progress=False, workers=workers)
    sim = res.runs[0]
    tb = str((run.summary.get("time_base") or {}).get("kind") or "wall")
    notes = _run_notes(run, scenario, tb, sim.failure)
    ratio = token_ratio(run.requests)
    if ratio != 1.0:
        notes.append(f"the engine counted {ratio:.3f} prompt tokens per token of agentbench's "
                     "count of the same text (its tokenizer): the measured throughput's "
                     "input is shown in agentbench's tokens, as the simulator counts")
    per_request = request_errors(run.requests, load(sim.run_dir).requests)
    rows = compare_figures(run.summary, sim.summary, ratio)
    zero = [r.label for r in rows if r.measured == 0 and r.error_unit == "%"]
    if zero:
        notes.append(f"measured 0 ({', '.join(zero)}): no relative error exists; a client "
                     "that reads several tokens in one chunk measures an ITL of 0")
    return SimCheck(run_dir=rd, sim_dir=sim.run_dir, preset=prov["name"], provenance=prov,
                    per_request=per_request,
                    instances=sc.endpoints[0].instances, measured_time_base=tb,
                    block_size=sc.endpoints[0].block_size, rows=rows, notes=notes)


def _run_notes(run: Any, scenario: dict[str, Any], tb: str, failure: str | None
               ) -> list[str]:
    """What sets the measured run apart from its prediction, before any figure: a
    simulated measurement, the wall clock's client overheads, a failed prediction, a
    measured run that ended early."""
    from agentbench.metrics.format import run_ended

    notes = []
    if any(isinstance(e, dict) and is_simulated(e)
           for e in scenario.get("endpoints") or []):
        notes.append("the measured run was itself simulated: this sets one preset "
                     "against another")
    if tb == "wall" and scenario.get("clock") != "virtual":
        notes.append("measured in wall-clock time: client overheads (HTTP, SSE, the event "
                     "loop) are in the measured figures, not in the predicted ones; a "
                     "server that ran faster than real time (serve-sim --speedup) is "
                     "measured that much faster")
    if failure:
        notes.append(f"the simulated run failed: {failure}")
    if (ended := run_ended(run.summary)) is not None:  # killed: 12 requests against 400
        notes.append(f"{ended.replace('the run', 'the measured run', 1)}; the prediction "
                     "replays its whole scenario, so the figures set part of a run against "
                     "all of it")
    return notes


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "%":
        return f"{100 * v:.1f}%"
    if unit == "":
        return f"{v:,.0f}"
    return f"{v:,.1f} {unit}" if abs(v) < 1000 else f"{v:,.0f} {unit}"


def _fmt_err(r: CheckRow) -> str:
    if r.error is None:
        return "-"
    if r.error_unit == "pt":
        return f"{r.error:+.1f} pt"
    return f"{100 * r.error:+.1f}%"


def format_check(check: SimCheck) -> str:
    """The table and what was checked, as ``agentbench sim check`` prints them."""
    p = check.provenance
    head = ["metric", "measured", "predicted", "error"]
    body = [[r.label, _fmt(r.measured, r.unit), _fmt(r.predicted, r.unit), _fmt_err(r)]
            for r in check.rows]
    w = [max(len(x[i]) for x in [head, *body]) for i in range(4)]
    lines = [f"preset {check.preset} ({check.instances} instance"
             f"{'s' if check.instances != 1 else ''}, KV blocks of {check.block_size} "
             f"token{'s' if check.block_size != 1 else ''}) checked against {check.run_dir}",
             f"  what is checked: {p['engine'] or '?'}"
             f"{' ' + p['engine_version'] if p.get('engine_version') else ''}, "
             f"{p['model'] or '?'} on {p['hardware'] or '?'}"
             f"{' (figures of ' + p['date'] + ')' if p.get('date') else ''}",
             ""]
    for row in [head, *body]:
        lines.append("  ".join([row[0].ljust(w[0])] + [c.rjust(w[i + 1])
                                                       for i, c in enumerate(row[1:])]))
    lines.append("")
    lines.append("error column: predicted / measured - 1 (hit rate: predicted - measured, in "
                 "points)")
    pr = check.per_request
    if pr.get("matched"):
        parts = [f"TTFT {pr['ttft_median']:.1%} (p90 {pr['ttft_p90']:.1%})"
                 if "ttft_median" in pr else "",
                 f"E2E {pr['e2e_median']:.1%} (p90 {pr['e2e_p90']:.1%})"
                 if "e2e_median" in pr else "",
                 f"cached share {pr['cached_share_median_pt']:.1f} pt (p90 "
                 f"{pr['cached_share_p90_pt']:.1f} pt)" if "cached_share_median_pt" in pr
                 else ""]
        lines.append(f"request by request ({pr['matched']:.0f} matched), median |error|: "
                     + ", ".join(p for p in parts if p))
    if "failed_measured" in pr:  # an engine's refusals (its context window) and others
        lines.append(f"failed requests: measured {pr['failed_measured']:.0f}, predicted "
                     f"{pr['failed_predicted']:.0f}, the same requests in both "
                     f"{pr['failed_both']:.0f}")
    lines += [f"note: {n}" for n in check.notes]
    lines.append(f"predicted run: {check.sim_dir}")
    return "\n".join(lines)
