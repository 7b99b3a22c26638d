"""The CI gate: compare a candidate run with a baseline under rules such as
``ttft_p50: {max_increase: 10%}``. A rule fails only when the regression exceeds its
threshold with the configured confidence, so run-to-run noise does not fail a build.

Runs of one scenario replay the same session trees, so trees are paired: each bootstrap
replicate draws tree ids once and recomputes the metric in both runs from that draw
(``paired_replicates``); the spread of the paired difference is each rule's *detectable*
change at this run size. Runs in virtual time are deterministic and compared exactly.
Metrics that cannot be resampled per tree are compared as point values and marked
``point``. Point values come from the summaries.

Trees paired within two runs do not see how a whole run shifts with the host (a real
engine's throughput moved 11,702-12,737 tok/s over five identical runs, and the tree
bootstrap false-alarmed on 2 of 10 such pairs). Given several baseline runs (identical
re-runs, e.g. ``agentbench run --repeat 3``), the run is the unit instead
(``run_level``): the candidate is one more draw from the baselines' spread, and a rule
fails when its regression against the baselines' mean exceeds the threshold by more than
the one-sided prediction bound ``t(c, k-1) * s * sqrt(1 + 1/k)`` of ``k`` baseline runs
with standard deviation ``s`` (in the rule's terms). Every metric, point ones included, is
then compared this way (docs/ci.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError, printable
from agentbench.metrics.catalog import METRICS, format_value
from agentbench.report.gaterules import GateOptions, Rule


@dataclass
class RuleResult:
    rule: Rule
    base: float | None
    cand: float | None
    change: float | None             # observed regression (positive = worse)
    bound: float | None              # lower confidence bound of the regression
    status: str                      # pass | FAIL | n/a
    note: str = ""
    #: half-width of the paired difference's bootstrap interval, in the rule's terms; 0
    #: when the runs compare exactly (virtual time); None for point rules
    detectable: float | None = None
    point: bool = False              # compared as point values (no per-tree resampling)
    warning: str = ""                # e.g. the threshold is below the detectable change


@dataclass
class GateResult:
    results: list[RuleResult] = field(default_factory=list)
    options: GateOptions = field(default_factory=GateOptions)
    exact: bool = False              # both runs in virtual time: compared exactly
    warnings: list[str] = field(default_factory=list)  # e.g. comparability not checked
    baselines: int = 1               # baseline runs; more than one: the run is the unit
    #: a regression no rule measures: the candidate served nothing (its rules unchecked)
    failure: str | None = None

    @property
    def passed(self) -> bool:
        return self.failure is None and all(r.status != "FAIL" for r in self.results)


def _change(rule: Rule, base: Any, cand: Any) -> Any:
    """Regression (positive = worse) of cand against base, in the rule's terms."""
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = (np.asarray(cand) / np.asarray(base) - 1.0) if rule.kind == "rel" \
            else np.asarray(cand) - np.asarray(base)
    return diff if rule.direction == "max_increase" else 0.0 - diff


def evaluate(base_dir: str | Path | list[str | Path], cand_dir: str | Path,
             rules: list[Rule], opts: GateOptions,
             allow: set[str] | frozenset[str] = frozenset()) -> GateResult:
    """Apply every rule to a candidate results folder against one baseline folder or
    several (identical re-runs: compared run by run, see the module doc); summaries are
    computed when missing.

    Refuses (``InputError``) runs whose fingerprints differ in a field not in ``allow``
    (``agentbench.scenario.fingerprint.check_comparable``)."""
    from agentbench.metrics.bootstrap import tree_data
    from agentbench.metrics.derive import derive
    from agentbench.metrics.format import run_ended
    from agentbench.metrics.run import load
    from agentbench.metrics.summary import NO_SESSIONS
    from agentbench.report.comparison import WITH_ITSELF, same_run
    from agentbench.results import schema as R
    from agentbench.results.runfolder import require_run_json
    from agentbench.results.timebase import VIRTUAL
    from agentbench.scenario.fingerprint import check_comparable

    base_dirs = list(base_dir) if isinstance(base_dir, list) else [base_dir]
    for d in [*base_dirs, cand_dir]:
        if Path(d).is_dir():
            # its GPUs, time base and fingerprint are unknown: a summary left in it and the
            # figures resampled from its rows would disagree (a false regression)
            require_run_json(Path(d), scenario=True)
    bases = [load(d) for d in base_dirs]
    runs = [bases[0], load(cand_dir)]
    for r, which in [*((b, "baseline") for b in bases), (runs[1], "candidate")]:
        ended = run_ended(r.summary)
        if ended is not None:
            # its figures cover part of the run: a killed candidate "improved" its TTFT
            raise InputError(f"the {which} is no whole run to gate: {ended}",
                             source=str(r.path))
        if which == "baseline" and not (
                r.summary.get("overall") or {}).get("requests", {}).get("ok"):
            # nothing to compare with (a candidate that served nothing is a regression)
            raise InputError("the baseline has no successful measured request: nothing "
                             "to gate against (see its summary for why)",
                             source=str(r.path))
    out = GateResult(options=opts)
    out.warnings = check_comparable([r.records.run for r in [*bases, runs[1]]], allow)
    if not (runs[1].summary.get("overall") or {}).get("requests", {}).get("ok"):
        # the change broke serving (or the endpoint was down): a regression, said in the
        # table and the PR comment, where it was exit 2 with no gate.md
        out.failure = ("the candidate has no successful measured request "
                       f"({_failed(runs[1].summary)}): no rule could be checked")
        return out
    cand = runs[1]
    same = [h for b in bases if (h := same_run(b, b.records.run, cand, cand.records.run))]
    if same:  # it passes, as it should; but a pass of a run against itself proves nothing
        out.warnings.append(f"baseline and candidate are {same[0]}: {WITH_ITSELF}")
    for r, which in [*((b, "baseline") for b in bases), (runs[1], "candidate")]:
        if R.SESSIONS_FILE in r.records.missing:  # its agents' figures are fallbacks
            out.warnings.append(f"the {which} {r.path.name}: {NO_SESSIONS}")
    out.exact = all(r.records.time_base.kind == VIRTUAL for r in runs)
    if out.exact and len(bases) > 1:
        out.warnings.append("virtual time: the first baseline is compared exactly, the "
                            "others add nothing (identical by design)")
        bases = bases[:1]
    out.baselines = len(bases)
    tds = []
    if not out.exact and len(bases) == 1:
        for r in runs:
            rec = r.records
            tds.append(tree_data(rec, derive(rec.requests, rec.events)))
    for i, rule in enumerate(rules):
        out.results.append(_rule_result(rule, i, bases, runs[1], out.exact, tds, opts))
    if out.results and all(r.status == "n/a" for r in out.results):
        # a pass that checked nothing, as of a run that served nothing (refused above)
        why = "; ".join(f"{r.rule.metric} has {r.note}" for r in out.results)
        raise InputError(f"no rule could be checked: {why} (docs/ci.md)",
                         source="agentbench gate")
    return out


def _failed(summary: dict[str, Any]) -> str:
    """What a run's requests came to: ``274 of 274 failed: http_400 x274``, its three
    commonest errors."""
    req = (summary.get("overall") or {}).get("requests") or {}
    got = req.get("errors")
    errors: list[Any] = got if isinstance(got, list) else []
    kinds = ", ".join(f"{e.get('error_type')} x{e.get('count')}" for e in errors[:3]
                      if isinstance(e, dict))
    more = f" (+{len(errors) - 3} more kinds)" if len(errors) > 3 else ""
    return f"{req.get('failed', 0)} of {req.get('total', 0)} failed" + (
        f": {kinds}{more}" if kinds else "")


def _rule_result(rule: Rule, i: int, bases: list[Any], cand: Any, exact: bool,
                 tds: list[Any], opts: GateOptions) -> RuleResult:
    """One rule of ``evaluate``: the candidate's change against the baselines' mean and
    the bound it is judged by (exact in virtual time; across baseline runs; a point value;
    else a paired bootstrap over trees, ``tds``, seeded by the rule's place ``i``)."""
    from agentbench.metrics.bootstrap import bootstrappable, paired_replicates

    m = METRICS[rule.metric]
    point = not bootstrappable(rule.metric)
    c = m.value(cand.summary["overall"])
    got = [m.value(b.summary["overall"]) for b in bases]
    values = [float(v) for v in got if v is not None]
    b = float(np.mean(values)) if None not in got else None
    if b is None or c is None:
        which = "either run" if b is None and c is None else \
            "the candidate" if c is None else "the baseline" if len(bases) == 1 else \
            "a baseline"
        return RuleResult(rule, b, c, None, None, "n/a", f"no value in {which}",
                          point=point)
    change = float(_change(rule, b, c))
    if rule.kind == "rel" and b == 0:
        # no relative change from 0: equal values did not change, and any rise from 0 is
        # past every % threshold (an error rate from 0% to 50% once read n/a and passed)
        change = 0.0 if c == 0 else change
        return RuleResult(rule, b, c, change, change,
                          "FAIL" if change > rule.threshold else "pass",
                          "baseline 0: compared as values (no relative change from 0)",
                          point=point)
    warning = ""
    detectable: float | None
    if exact:
        # deterministic runs: an identical re-run differs by exactly 0, so the change
        # itself is the bound (the last bit of a float is not a regression)
        bound, detectable = change, 0.0
        note = "virtual time: compared exactly"
        status = "FAIL" if change > rule.threshold + 1e-12 else "pass"
    elif len(values) > 1:
        detectable = run_level(rule, values, opts.confidence)
        bound = change - detectable
        note = f"{len(values)} baseline runs: the run is the unit"
        status = "FAIL" if bound > rule.threshold else "pass"
        point = False
        if status == "pass" and rule.threshold < detectable:
            warning = (f"threshold {_fmt_thr(rule)} is below the detectable change "
                       f"{_fmt_abs(rule, detectable)} across {len(values)} baseline "
                       "runs: a change near the threshold is not caught (more baseline "
                       "runs narrow it)")
    elif point:
        bound, detectable, note = change, None, "point values: no per-tree resampling"
        status = "FAIL" if bound > rule.threshold else "pass"
    else:
        rb, rc, paired = paired_replicates(tds[0], tds[1], rule.metric, opts.resamples,
                                           opts.seed + i)
        reg = _change(rule, rb, rc)
        reg = reg[np.isfinite(reg)]
        if reg.size:
            lo = float(np.quantile(reg, 1 - opts.confidence))
            hi = float(np.quantile(reg, opts.confidence))
            bound, detectable = lo, (hi - lo) / 2
        else:
            bound, detectable = change, None
        note = (f"{opts.resamples} resamples of {paired} paired trees" if paired else
                f"{opts.resamples} resamples over trees (no tree in both runs: unpaired)")
        status = "FAIL" if bound > rule.threshold else "pass"
        # only a pass can hide a regression below the detectable change; a caught one
        # needs no such caveat (it once read "below the detectable ±666%" on every
        # rule of a real regression)
        if status == "pass" and detectable is not None and rule.threshold < detectable:
            warning = (f"threshold {_fmt_thr(rule)} is below the detectable change "
                       f"{_fmt_abs(rule, detectable)} at this run size: a change near "
                       "the threshold is not caught (more trees narrow it)")
    return RuleResult(rule, b, c, change, bound, status, note, detectable=detectable,
                      point=point, warning=warning)


def run_level(rule: Rule, values: list[float], confidence: float) -> float:
    """The one-sided prediction bound, in the rule's terms, of one more run drawn like the
    ``values`` of ``k`` baseline runs: ``t(confidence, k-1) * s * sqrt(1 + 1/k)``, with
    ``s`` the standard deviation of each baseline's change against their mean. Under
    normal run-to-run variation an identical candidate exceeds it with probability
    ``1 - confidence``."""
    from scipy import stats

    k = len(values)
    mean = float(np.mean(values))
    spread = np.asarray([float(_change(rule, mean, v)) for v in values])
    s = float(np.std(spread, ddof=1))
    return float(stats.t.ppf(confidence, k - 1)) * s * float(np.sqrt(1 + 1 / k))


def _fmt_reg(rule: Rule, x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):  # a change from a baseline of 0
        return "+∞" if x > 0 else "-∞"
    if rule.kind == "rel":
        return f"{100 * x:+.1f}%"
    if rule.kind == "pt":
        return f"{100 * x:+.2f}pt"
    return f"{x:+.4g}"


def _fmt_thr(rule: Rule) -> str:
    if rule.kind == "rel":
        return f"{100 * rule.threshold:g}%"
    if rule.kind == "pt":
        return f"{100 * rule.threshold:g}pt"
    return f"{rule.threshold:g}"


def _fmt_abs(rule: Rule, x: float) -> str:
    return "±" + _fmt_reg(rule, x).lstrip("+")


def rows(result: GateResult) -> list[list[str]]:
    """Table rows: metric, rule, baseline, candidate, regression, bound, detectable,
    result. A point rule says ``point`` in its metric cell (and in the detectable cell
    when the runs are not compared exactly); a threshold below the detectable change puts
    ``⚠`` after the detectable cell."""
    out = []
    for r in result.results:
        m = METRICS[r.rule.metric]
        if result.exact:
            det = "exact"
        elif r.point:
            det = "point"
        elif r.detectable is None:
            det = "-"
        else:
            det = _fmt_abs(r.rule, r.detectable) + (" ⚠" if r.warning else "")
        name = r.rule.metric + (" (point)" if r.point else "")
        out.append([name, r.rule.text, format_value(m, r.base), format_value(m, r.cand),
                    _fmt_reg(r.rule, r.change), _fmt_reg(r.rule, r.bound), det, r.status])
    return out


HEADER = ["metric", "rule", "baseline", "candidate", "regression",
          "regression (lower bound)", "detectable", "result"]


def notes(result: GateResult) -> list[str]:
    """Lines under the table: comparability not checked, thresholds below what this run
    size detects, point rules."""
    out = [f"warning: {w}" for w in result.warnings]
    out += [f"warning: {r.rule.metric}: {r.warning}" for r in result.results if r.warning]
    # a rule left n/a passes nothing: say which run lacks the value (a candidate whose
    # server stopped reporting usage has no hit rate)
    out += [f"n/a: {r.rule.metric}: {r.note}: not checked" for r in result.results
            if r.status == "n/a"]
    points = [r.rule.metric for r in result.results if r.point]
    if points:
        why = ("exact here: virtual time" if result.exact
               else "run-to-run noise alone can fail them")
        out.append(f"point: {', '.join(points)} compared as point values, no per-tree "
                   f"resampling ({why})")
    # a run named by its folder (an escape sequence, a line break) stays one line
    return [printable(line) for line in out]


def _method(result: GateResult) -> str:
    if result.exact:
        return "both runs in virtual time (deterministic): compared exactly"
    o = result.options
    if result.baselines > 1:
        return (f"a rule fails when its regression against the mean of {result.baselines} "
                f"baseline runs exceeds its threshold by more than the baselines' "
                f"run-to-run spread allows at {100 * o.confidence:g}% confidence "
                "(one-sided prediction bound, t distribution)")
    return (f"a rule fails when the lower bound of its regression at "
            f"{100 * o.confidence:g}% confidence (paired bootstrap over session trees, "
            f"{o.resamples} resamples, seed {o.seed}) exceeds its threshold")


def _not_checked(result: GateResult) -> str:
    """``, 2 not checked (n/a)`` when rules were left n/a, else ''."""
    n = sum(r.status == "n/a" for r in result.results)
    return f", {n} not checked (n/a)" if n else ""


def format_table(result: GateResult) -> str:
    """Plain-text table for the terminal."""
    if result.failure is not None:
        return "\n".join([*notes(result), printable(f"REGRESSION: {result.failure}")])
    table = [HEADER, *rows(result)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    lines += notes(result)
    verdict = "PASS" if result.passed else "REGRESSION"
    lines.append(f"{verdict}: {sum(r.status == 'FAIL' for r in result.results)} of "
                 f"{len(result.results)} rules failed{_not_checked(result)}; "
                 f"{_method(result)}")
    return "\n".join(lines)


def format_markdown(result: GateResult, base_label: str, cand_label: str) -> str:
    """Markdown for a PR comment."""
    from html import escape

    def cell(x: str) -> str:
        return escape(x, quote=False).replace("|", "\\|")

    icon = {"pass": "✅ pass", "FAIL": "❌ FAIL", "n/a": "➖ n/a"}
    if result.failure is not None:
        lines = ["### agentbench gate: ❌ regression", "",
                 f"Baseline `{cell(base_label)}` vs candidate `{cell(cand_label)}`: "
                 f"{cell(result.failure)}."]
        if extra := notes(result):
            lines += ["", *(f"- {cell(n)}" for n in extra)]
        return "\n".join(lines) + "\n"
    verdict = ("✅ no regression" if result.passed else "❌ regression") + _not_checked(result)
    lines = [f"### agentbench gate: {verdict}", "",
             f"Baseline `{cell(base_label)}` vs candidate `{cell(cand_label)}`; "
             f"{_method(result)}. *detectable*: the smallest change this run size tells "
             "from noise (docs/ci.md).", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in rows(result):
        row[-1] = icon.get(row[-1], row[-1])
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    extra = notes(result)
    if extra:
        lines += ["", *(f"- {cell(n)}" for n in extra)]
    return "\n".join(lines) + "\n"
