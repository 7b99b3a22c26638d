"""The CI gate: compare a candidate run with a baseline under rules such as
``ttft_p50: {max_increase: 10%}``. A rule fails only when the regression exceeds its
threshold with the configured confidence (bootstrap over session trees), so run-to-run
noise does not fail a build. Point values come from the summaries."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.metrics.catalog import METRICS, format_value

DEFAULT_RULES: dict[str, dict[str, str]] = {
    "ttft_p50": {"max_increase": "10%"},
    "e2e_p50": {"max_increase": "10%"},
    "hit_rate": {"max_drop": "2pt"},
    "throughput_per_gpu": {"max_drop": "5%"},
    "error_rate": {"max_increase": "1pt"},
}
OPTION_KEYS = ("confidence", "resamples", "seed")
_THRESHOLD = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(%|pt)?\s*$")


@dataclass
class Rule:
    metric: str
    direction: str   # "max_increase" | "max_drop"
    kind: str        # "rel" (%), "pt" (points of a share), "abs" (metric unit)
    threshold: float  # fraction for rel and pt, metric unit for abs
    text: str


@dataclass
class GateOptions:
    confidence: float = 0.95
    resamples: int = 1000
    seed: int = 0


@dataclass
class RuleResult:
    rule: Rule
    base: float | None
    cand: float | None
    change: float | None             # observed regression (positive = worse)
    bound: float | None              # lower confidence bound of the regression
    status: str                      # pass | FAIL | n/a
    note: str = ""


@dataclass
class GateResult:
    results: list[RuleResult] = field(default_factory=list)
    options: GateOptions = field(default_factory=GateOptions)

    @property
    def passed(self) -> bool:
        return all(r.status != "FAIL" for r in self.results)


def parse_threshold(value: Any, metric: str, where: str) -> tuple[str, float]:
    """'10%' → ("rel", 0.10); '2pt' → ("pt", 0.02); 5 → ("abs", 5.0)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "abs", float(value)
    mt = _THRESHOLD.match(str(value))
    if not mt:
        raise InputError(f"threshold {value!r}: use '10%', '2pt' or a number", where=where,
                         field=metric)
    x = float(mt.group(1))
    unit = mt.group(2)
    if unit == "pt" and not METRICS[metric].share:
        raise InputError("'pt' applies to shares (hit rate, goodput, error rate)",
                         where=where, field=metric)
    return ("rel", x / 100) if unit == "%" else ("pt", x / 100) if unit == "pt" else ("abs", x)


def parse_rules(data: Any, source: str = "<rules>") -> tuple[list[Rule], GateOptions]:
    """Rules from a mapping: ``{metric: {max_increase|max_drop: threshold}}``, optionally
    under ``rules:``, with ``confidence``, ``resamples``, ``seed`` beside them."""
    if not isinstance(data, dict):
        raise InputError("rules must be a mapping of metric names", source=source)
    opts = GateOptions()
    for k in OPTION_KEYS:
        if k in data:
            try:
                setattr(opts, k, type(getattr(opts, k))(data[k]))
            except (TypeError, ValueError):
                raise InputError(f"not a number: {data[k]!r}", source=source, field=k) from None
    if not 0.5 <= opts.confidence < 1:
        raise InputError("confidence must be in [0.5, 1)", source=source, field="confidence")
    if opts.resamples < 10:
        raise InputError("resamples must be at least 10", source=source, field="resamples")
    body = data.get("rules", {k: v for k, v in data.items() if k not in OPTION_KEYS})
    if not isinstance(body, dict) or not body:
        raise InputError("no rules given", source=source)
    rules = []
    for metric, spec in body.items():
        if metric not in METRICS:
            raise InputError(f"unknown metric; known: {', '.join(METRICS)}", source=source,
                             field=str(metric))
        if not isinstance(spec, dict) or not spec:
            raise InputError("expected {max_increase: ...} or {max_drop: ...}", source=source,
                             field=metric)
        for direction, value in spec.items():
            if direction not in ("max_increase", "max_drop"):
                raise InputError(f"unknown key {direction!r}; use max_increase or max_drop",
                                 source=source, field=metric)
            kind, thr = parse_threshold(value, metric, source)
            rules.append(Rule(metric, direction, kind, thr, f"{direction}: {value}"))
    return rules, opts


def load_rules(path: str | Path | None) -> tuple[list[Rule], GateOptions]:
    """Rules from a YAML file, or the defaults when no file is given."""
    if path is None:
        return parse_rules(DEFAULT_RULES, "<default rules>")
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", source=str(p)) from None
    except yaml.YAMLError as e:
        raise InputError(f"not valid YAML ({e})", source=str(p)) from None
    return parse_rules(data, str(p))


def _change(rule: Rule, base: Any, cand: Any) -> Any:
    """Regression (positive = worse) of cand against base, in the rule's terms."""
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = (np.asarray(cand) / np.asarray(base) - 1.0) if rule.kind == "rel" \
            else np.asarray(cand) - np.asarray(base)
    return diff if rule.direction == "max_increase" else -diff


def evaluate(base_dir: str | Path, cand_dir: str | Path, rules: list[Rule],
             opts: GateOptions) -> GateResult:
    """Apply every rule to two results folders (summaries computed when missing)."""
    from agentbench.api import load
    from agentbench.metrics.bootstrap import bootstrappable, replicates, tree_data
    from agentbench.metrics.derive import derive

    runs = [load(base_dir), load(cand_dir)]
    tds = []
    for r in runs:
        rec = r.records
        tds.append(tree_data(rec, derive(rec.requests, rec.events)))
    out = GateResult(options=opts)
    for i, rule in enumerate(rules):
        m = METRICS[rule.metric]
        b = m.value(runs[0].summary["overall"])
        c = m.value(runs[1].summary["overall"])
        if b is None or c is None or (rule.kind == "rel" and b == 0):
            out.results.append(RuleResult(rule, b, c, None, None, "n/a",
                                          "value missing in a run"))
            continue
        change = float(_change(rule, b, c))
        if bootstrappable(rule.metric):
            seed = opts.seed + 2 * i
            rb = replicates(tds[0], rule.metric, opts.resamples, seed)
            rc = replicates(tds[1], rule.metric, opts.resamples, seed + 1)
            reg = _change(rule, rb, rc)
            reg = reg[np.isfinite(reg)]
            bound = float(np.quantile(reg, 1 - opts.confidence)) if reg.size else change
            note = f"{opts.resamples} resamples over trees"
        else:
            bound, note = change, "no per-tree resampling: point values"
        status = "FAIL" if bound > rule.threshold else "pass"
        out.results.append(RuleResult(rule, b, c, change, bound, status, note))
    return out


def _fmt_reg(rule: Rule, x: float | None) -> str:
    if x is None:
        return "-"
    if rule.kind == "rel":
        return f"{100 * x:+.1f}%"
    if rule.kind == "pt":
        return f"{100 * x:+.2f}pt"
    return f"{x:+.4g}"


def rows(result: GateResult) -> list[list[str]]:
    """Table rows: metric, rule, baseline, candidate, regression, bound, status."""
    out = []
    for r in result.results:
        m = METRICS[r.rule.metric]
        out.append([r.rule.metric, r.rule.text, format_value(m, r.base),
                    format_value(m, r.cand), _fmt_reg(r.rule, r.change),
                    _fmt_reg(r.rule, r.bound), r.status])
    return out


HEADER = ["metric", "rule", "baseline", "candidate", "regression",
          "regression (lower bound)", "result"]


def format_table(result: GateResult) -> str:
    """Plain-text table for the terminal."""
    table = [HEADER, *rows(result)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    verdict = "PASS" if result.passed else "REGRESSION"
    lines.append(f"{verdict}: {sum(r.status == 'FAIL' for r in result.results)} of "
                 f"{len(result.results)} rules failed at {100 * result.options.confidence:g}% "
                 f"confidence (a rule fails when the lower bound exceeds its threshold)")
    return "\n".join(lines)


def format_markdown(result: GateResult, base_label: str, cand_label: str) -> str:
    """Markdown for a PR comment."""
    from html import escape

    def cell(x: str) -> str:
        return escape(x).replace("|", "\\|")

    icon = {"pass": "✅ pass", "FAIL": "❌ FAIL", "n/a": "➖ n/a"}
    verdict = "✅ no regression" if result.passed else "❌ regression"
    lines = [f"### agentbench gate: {verdict}", "",
             f"Baseline `{cell(base_label)}` vs candidate `{cell(cand_label)}`; a rule fails "
             f"only when its regression exceeds the threshold with "
             f"{100 * result.options.confidence:g}% confidence (bootstrap over session "
             f"trees, {result.options.resamples} resamples, seed {result.options.seed}).", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in rows(result):
        row[-1] = icon.get(row[-1], row[-1])
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"
