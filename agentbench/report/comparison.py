"""``compare(r1, r2, ...)`` (``agentbench.compare``): runs side by side against the first,
after checking that they are comparable (their fingerprints)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbench.errors import InputError
from agentbench.metrics.run import Run, load

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Comparison:
    """Runs side by side. ``values``: floats, one row per metric (index: the metric's
    name, e.g. ``ttft_p50``; shares as fractions), one column per run name; ``ratios``:
    each value ÷ the first run's; ``table``: the formatted view (rows by label, changes
    against the first run in words); ``headlines``: one published-style sentence per
    later run."""

    runs: list[Run]
    values: pd.DataFrame
    ratios: pd.DataFrame
    table: pd.DataFrame
    headlines: list[str]
    #: what could not be checked for comparability (runs without a fingerprint), figures
    #: on few requests, a run folder given twice
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join([self.table.to_string(), "", *self.headlines,
                          *(f"warning: {w}" for w in self.warnings)])

    def _repr_html_(self) -> str:
        from html import escape

        heads = "".join(f"<li>{escape(h)}</li>" for h in self.headlines)
        # a notebook shows this view alone: its warnings are in it, as in ``str``
        warns = "".join(f"<p><b>warning:</b> {escape(w)}</p>" for w in self.warnings)
        return self.table.to_html(escape=True) + f"<ul>{heads}</ul>" + warns


def compare(*runs: Run | str | Path, block: str = "overall",
            allow: str | Iterable[str] = (), labels: Iterable[str] | None = None
            ) -> Comparison:
    """Compare runs (``Run`` objects or results folders) against the first one.

    Runs must be comparable: the same trace content, filters, transforms, load, timing,
    time base and endpoint kinds (run.json ``fingerprint``), except the fields named in
    ``allow`` (e.g. ``("endpoints", "load")``, ``"endpoints,load"``, or ``"all"``);
    otherwise ``InputError`` names every field that differs. ``labels`` names the runs
    in the table, headlines and warnings (default: their variant names, less the part
    all share; ``run_labels``): one distinct, non-empty name a run."""
    from agentbench.report.compare import (
        comparison_ratios,
        comparison_values,
        format_table,
        headline,
        run_labels,
    )
    from agentbench.results.runfolder import read_run_json
    from agentbench.scenario.fingerprint import check_comparable, parse_allow

    rs = [r if isinstance(r, Run) else load(r) for r in runs]
    if len(rs) < 2:
        raise ValueError("compare needs at least two runs")
    allowed = parse_allow(allow if isinstance(allow, str) else list(allow), source="allow")
    for r in rs:  # a block every summary has (a bare KeyError otherwise)
        if not _is_block(r.summary.get(block)):
            known = sorted(k for k, v in r.summary.items() if _is_block(v))
            raise InputError(f"no block {block!r} in its summary (blocks: "
                             f"{', '.join(known)})", source=str(r.path), field="block")
    sums = [r.summary for r in rs]
    names = run_labels(sums) if labels is None else _labels(labels, len(rs))
    warnings = check_comparable([read_run_json(r.path) for r in rs], allowed)
    heads = [f"{lab} vs {names[0]}: {headline(sums[0], s, block=block)}"
             for lab, s in zip(names[1:], sums[1:], strict=True)]
    warnings += same_folders(names, rs)
    warnings += few_requests(names, sums, block)
    values = comparison_values(sums, block=block, labels=names)
    return Comparison(rs, values, comparison_ratios(values), format_table(values), heads,
                      warnings)


def _labels(labels: Iterable[str], n: int) -> list[str]:
    """``compare``'s ``labels``, checked: one distinct, non-empty string a run."""
    out = list(labels) if not isinstance(labels, str) else [labels]
    if len(out) != n or not all(isinstance(x, str) and x for x in out) \
            or len(set(out)) != n:
        raise ValueError(f"labels: {n} distinct non-empty names are needed, one a run "
                         f"(got {out!r:.200})")
    return out


def _is_block(v: Any) -> bool:
    """A summary's block of figures (``overall``): a mapping with its requests."""
    return isinstance(v, dict) and isinstance(v.get("requests"), dict)


#: why a run compared with its own folder is said (``same_folders``, and the gate's)
WITH_ITSELF = "compared with itself, every change is zero by construction"


def folder_key(run: Run) -> str:
    """The folder ``run`` was read from, links resolved: two runs with one key are one."""
    import os

    return os.path.realpath(run.path)


def same_folders(labels: list[str], runs: list[Run]) -> list[str]:
    """A warning per run whose folder is an earlier run's (``compare(r, r)``, or a folder
    and a link to it): compared with itself, every change is zero by construction. Kept a
    comparison (it shows a table's shape), but no longer without a word."""
    seen: dict[str, tuple[str, Run]] = {}
    out = []
    for lab, r in zip(labels, runs, strict=True):
        key = folder_key(r)
        if key in seen:
            first, run = seen[key]
            out.append(f"{first} and {lab} are the same run folder ({run.path}): "
                       f"{WITH_ITSELF}")
        else:
            seen[key] = lab, r
    return out


#: successful measured requests under which a run's figures are called rough
FEW_REQUESTS = 30


def few_requests(labels: list[str], sums: list[dict[str, Any]], block: str) -> list[str]:
    """A warning per run whose figures rest on fewer than ``FEW_REQUESTS`` successful
    measured requests (a ratio such as "throughput 45x" from 6 requests means little)."""
    out = []
    for lab, s in zip(labels, sums, strict=True):
        b = s.get(block)
        ok = (b.get("requests") or {}).get("ok") if isinstance(b, dict) else None
        if isinstance(ok, int) and ok < FEW_REQUESTS:
            out.append(f"{lab}: its figures rest on {ok} successful measured request"
                       f"{'' if ok == 1 else 's'} (under {FEW_REQUESTS}): rough at best")
    return out

