"""The gate's rules (``report.gate``): per metric, ``{max_increase|max_drop: threshold}``,
the threshold relative to the baseline ('10%'), in points of a share ('2pt') or in the
metric's unit (a number), with the comparison's options beside them (``confidence``,
``resamples``, ``seed``); read from a YAML file, or the defaults (docs/ci.md)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.metrics.catalog import METRICS

DEFAULT_RULES: dict[str, dict[str, str]] = {
    "ttft_p50": {"max_increase": "10%"},
    "e2e_p50": {"max_increase": "10%"},
    "hit_rate": {"max_drop": "2pt"},
    "throughput_per_gpu": {"max_drop": "5%"},
    "error_rate": {"max_increase": "1pt"},
}
OPTION_KEYS = ("confidence", "resamples", "seed")
#: bootstrap resamples at most (each is a weight per tree; the default is 1,000)
MAX_RESAMPLES = 100_000
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


def parse_threshold(value: Any, metric: str, where: str) -> tuple[str, float]:
    """'10%' → ("rel", 0.10); '2pt' → ("pt", 0.02); 5 → ("abs", 5.0)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        x = float(value) if isinstance(value, float) or abs(value) < 2**1000 else math.inf
        if not math.isfinite(x):  # a NaN threshold no regression passes: it never fails
            raise InputError(f"threshold {value!r}: must be a finite number", where=where,
                             field=metric)
        if x < 0:  # as '-5%' is: a rule that even an identical re-run fails
            raise InputError(f"threshold {value!r}: must not be negative (the change "
                             "allowed)", where=where, field=metric)
        return "abs", x
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
            v = data[k]
            whole = k != "confidence"
            if isinstance(v, bool) or not isinstance(v, int if whole else (int, float)):
                what = "a whole number" if whole else "a number"
                raise InputError(f"not {what}: {v!r}", source=source, field=k)
            setattr(opts, k, v)
    if not 0.5 <= opts.confidence < 1:
        raise InputError("confidence must be in [0.5, 1)", source=source, field="confidence")
    if not 10 <= opts.resamples <= MAX_RESAMPLES:
        raise InputError(f"resamples must be from 10 to {MAX_RESAMPLES:,}", source=source,
                         field="resamples")
    if opts.seed < 0:
        raise InputError("seed must not be negative", source=source, field="seed")
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
            _check_direction(metric, direction, source)
            kind, thr = parse_threshold(value, metric, source)
            rules.append(Rule(metric, direction, kind, thr, f"{direction}: {value}"))
    return rules, opts


def _check_direction(metric: str, direction: str, source: str) -> None:
    """A rule guards the way its metric gets worse: ``ttft_p50: {max_drop: 10%}`` failed
    a candidate 10x faster as a regression, where the report calls it better. Figures of
    the workload (``Metric.judged`` False: the potential hit rate, API prices) take
    either key."""
    m = METRICS[metric]
    worse = "max_increase" if m.better == "lower" else "max_drop"
    if m.judged and direction != worse:
        raise InputError(f"{direction}: a {m.better} {metric} is better, so the rule would "
                         f"fail an improvement; use {worse}", source=source, field=metric)


#: bytes at most in a gate rules file (a few hundred in practice)
MAX_RULES_BYTES = 1 << 20


def load_rules(path: str | Path | None) -> tuple[list[Rule], GateOptions]:
    """Rules from a YAML file, or the defaults when no file is given."""
    if path is None:
        return parse_rules(DEFAULT_RULES, "<default rules>")
    from agentbench.scenario.yamlfile import read_small_text, read_yaml

    # bounded as a scenario is (size, nesting, aliases): a rules file that crashed would
    # exit 1, which CI reads as a regression
    text = read_small_text(path, "rules file", MAX_RULES_BYTES)
    data, _ = read_yaml(text, str(path))
    return parse_rules(data, str(path))
