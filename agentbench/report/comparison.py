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
    all share; ``run_labels``): one distinct, non-blank name a run (``_labels``)."""
    from agentbench.report.compare import (
        NO_COMMON_FIGURE,
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
    infos = [read_run_json(r.path) for r in rs]
    warnings = check_comparable(infos, allowed)
    # a pair with no figure in common says so, as the report does, not an empty line
    heads = [f"{lab} vs {names[0]}: {headline(sums[0], s, block=block) or NO_COMMON_FIGURE}"
             for lab, s in zip(names[1:], sums[1:], strict=True)]
    warnings += same_folders(names, rs, infos)
    warnings += few_requests(names, sums, block)
    values = comparison_values(sums, block=block, labels=names)
    return Comparison(rs, values, comparison_ratios(values), format_table(values), heads,
                      warnings)


def _labels(labels: Iterable[str], n: int) -> list[str]:
    """``compare``'s ``labels``, checked: one distinct, non-blank string a run, none the
    name of a change column (``b vs a``, with ``a`` the first): the table's columns are
    the runs' names and those, and one that was both showed the change alone."""
    out = list(labels) if not isinstance(labels, str) else [labels]
    changes = {f"{x} vs {out[0]}" for x in out[1:]} if out else set()
    if len(out) != n or not all(isinstance(x, str) and x.strip() for x in out) \
            or len(set(out)) != n or changes & set(out):
        raise ValueError(f"labels: {n} distinct non-blank names are needed, one a run, "
                         f"none 'b vs a' of two others (got {out!r:.200})")
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


def run_identity(info: dict[str, Any]) -> tuple[Any, ...] | None:
    """What makes a run one run (run.json's run id, the wall time it started, its process
    and host): two folders of one identity are copies of one run; None when a field is
    missing (an older writer's run.json)."""
    host = info.get("host")
    ident = (info.get("run_id"), info.get("start_wall"), info.get("pid"),
             host.get("hostname") if isinstance(host, dict) else None)
    return ident if all(x is not None for x in ident) else None


def same_run(a: Run, info_a: dict[str, Any], b: Run, info_b: dict[str, Any]) -> str | None:
    """How ``a`` and ``b`` are one run ("the same run folder (PATH)", or "copies of one
    run (...)": a folder copied, or a baseline saved by copying it), or None."""
    if folder_key(a) == folder_key(b):
        return f"the same run folder ({a.path})"
    ident = run_identity(info_a)
    if ident is not None and ident == run_identity(info_b):
        return (f"copies of one run ({a.path} and {b.path}: run id {ident[0]}, started "
                f"{ident[1]})")
    return None


def same_folders(labels: list[str], runs: list[Run],
                 infos: list[dict[str, Any]]) -> list[str]:
    """A warning per run that is an earlier run (``compare(r, r)``, a folder and a link to
    it, or a copy of its folder: ``same_run``): compared with itself, every change is zero
    by construction. Kept a comparison (it shows a table's shape), but not without a
    word."""
    out = []
    for k, (lab, r, info) in enumerate(zip(labels, runs, infos, strict=True)):
        for j in range(k):
            how = same_run(runs[j], infos[j], r, info)
            if how is not None:
                out.append(f"{labels[j]} and {lab} are {how}: {WITH_ITSELF}")
                break
    return out


#: successful measured requests under which a run's figures are called rough
FEW_REQUESTS = 30


def few_requests(labels: list[str], sums: list[dict[str, Any]], block: str) -> list[str]:
    """A warning per run whose figures rest on fewer than ``FEW_REQUESTS`` successful
    measured requests (a ratio such as "throughput 45x" from 6 requests means little), or
    on none: its figures are of failures alone."""
    out = []
    for lab, s in zip(labels, sums, strict=True):
        b = s.get(block)
        ok = (b.get("requests") or {}).get("ok") if isinstance(b, dict) else None
        if ok == 0:
            out.append(f"{lab}: no measured request succeeded: its figures are of failures "
                       "alone (its errors say why)")
        elif isinstance(ok, int) and ok < FEW_REQUESTS:
            out.append(f"{lab}: its figures rest on {ok} successful measured request"
                       f"{'' if ok == 1 else 's'} (under {FEW_REQUESTS}): rough at best")
    return out

