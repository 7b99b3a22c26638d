"""``agentbench report``: a self-contained report.html (plots embedded as base64 PNG) and a
report.md (plots beside it in plots/) for one run or a comparison of several. It formats
summaries; raw rows are read only to draw distributions and timelines. Every string that
comes from a trace or a scenario is escaped."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.metrics.format import run_ended
from agentbench.metrics.run import Run, load
from agentbench.report import charts
from agentbench.report.compare import (
    KEY_ROWS,
    NO_COMMON_FIGURE,
    comparison_values,
    format_table,
    headline,
    metric,
    run_labels,
    shared_name,
    verdict,
)
from agentbench.report.comparison import few_requests
from agentbench.report.figures import (
    curve_figures,
    end_s,
    latency_figures,
    swimlane_figure,
    time_note,
    timeline_figure,
)
from agentbench.report.onerun import (
    agents_section,
    agentx_figure,
    cost_section,
    errors_section,
    requests_sections,
    row_label,
    scenario_section,
    time_lines,
    validity_lines,
)
from agentbench.report.page import Section, to_html, to_markdown

#: up to this many runs, a comparison's values and changes share one table
WIDE_RUNS = 3


def workload_differences(runs: Sequence[Run]) -> str | None:
    """One sentence when the runs' fingerprints differ (docs/ci.md: what ``gate`` and
    ``compare`` refuse without ``--allow``), or their traces could not be compared (hashed
    by two fingerprint versions), else None: a report compares them anyway, and says that
    its changes are then not the serving's alone."""
    from agentbench.scenario.fingerprint import fingerprint_differences, versions_not_compared

    warnings, _, differing = fingerprint_differences([r.records.run for r in runs])
    said = []
    if differing:
        said.append(f"the runs differ in {', '.join(differing)} (their fingerprints: the "
                    "workload or how it was replayed), so a change below is not the "
                    "serving's alone; agentbench gate and compare refuse such runs unless "
                    "allowed")
    versions = versions_not_compared(warnings)
    if versions:
        said.append("their traces were hashed by two fingerprint versions and could not be "
                    f"compared (version {'; version '.join(versions)}): record the older "
                    "run again to compare them")
    return "; ".join(said) or None


#: scenario keys that name or describe a run, or where it went: not how it ran
_NOT_SETTINGS = ("name", "description", "variants", "output")


def _differing(values: list[Any], path: str = "") -> Iterator[tuple[str, list[Any]]]:
    """``(key.path, each run's value)`` where the runs' values differ, keys written as
    ``--set`` takes them (``endpoints.0.router``). A section some run lacks is one value
    (``endpoints.0.nvme_tier``) while the runs that have it agree on it."""
    dicts = [v for v in values if isinstance(v, dict)]
    # a section some runs lack is one value while the others agree on it, else its keys
    if dicts and all(v is None or isinstance(v, dict) for v in values) and (
            len(dicts) == len(values) or _differ(dicts)):
        for k in dict.fromkeys(k for v in dicts for k in v):
            if path or k not in _NOT_SETTINGS:
                yield from _differing([(v or {}).get(k) for v in values], f"{path}{k}.")
    elif all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1:
        for i, vs in enumerate(zip(*values, strict=True)):
            yield from _differing(list(vs), f"{path}{i}.")
    elif _differ(values):
        yield path.rstrip("."), values


def _differ(values: list[Any]) -> bool:
    return len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1


def settings_differences(runs: Sequence[Run], labels: Sequence[str]) -> str | None:
    """The scenario keys the runs set differently, each value with the runs that have it
    (``run --set endpoints.0.router=round_robin`` against the scenario as written), or
    None. A comparison showed one description above runs routed two ways, without a word
    of it; the fingerprint (``workload_differences``) leaves the serving side out."""
    scenarios = [(r.records.run or {}).get("scenario") for r in runs]
    # a run.json that names no scenario (hand-made, or recovered from a damaged one)
    # would differ in every key: nothing to say of it
    differ = list(_differing(scenarios)) if all(
        isinstance(sc, dict) and sc for sc in scenarios) else []
    if not differ:
        return None

    def shown(v: Any) -> str:
        text = "-" if v is None else v if isinstance(v, str) else json.dumps(v, default=str)
        return text if len(text) <= 80 else text[:77] + "..."

    said = []
    for key, values in differ[:8]:
        groups: dict[str, list[str]] = {}
        for lab, v in zip(labels, values, strict=True):
            groups.setdefault(shown(v), []).append(lab)
        said.append(f"{key}: " + ", ".join(f"{v} ({', '.join(labs)})"
                                           for v, labs in groups.items()))
    more = f"; and {len(differ) - 8} more keys" if len(differ) > 8 else ""
    return f"Set differently in the runs' scenarios: {'; '.join(said)}{more}."


def _comparison_section(runs: Sequence[Run], labels: Sequence[str]) -> Section:
    sums = [r.summary for r in runs]
    sec = Section("Comparison", text=[
        f"Reference: {labels[0]} (the first run given, or --reference); every change is "
        "against it."])
    differ = workload_differences(runs)
    if differ is not None:
        sec.text.append(f"Warning: {differ}")
    cut = [f"{lab} ({s['run'].get('status')})" for lab, s in zip(labels, sums, strict=True)
           if run_ended(s)]
    if cut:  # a run cut short looks faster and cheaper than it is
        whose = "their figures cover" if len(cut) > 1 else "its figures cover"
        sec.text.append(f"Warning: {', '.join(cut)} did not complete: {whose} part of the "
                        "run (agentbench gate refuses such runs).")
    # as agentbench.compare warns: a run's figures on few successful requests, or none
    sec.text += [f"Warning: {w}." for w in few_requests(list(labels), sums, "overall")]
    bases = {json.dumps({k: (s.get("time_base") or {}).get(k) for k in ("kind", "speedup")})
             for s in sums}
    if len(bases) > 1:
        sec.text.append("Warning: the runs are in different time bases (simulated at "
                        "different speedups, or wall-clock); see each run's section.")
    settings = settings_differences(runs, labels)
    if settings is not None:
        sec.text.append(settings)
    # the headline changes after the warnings that qualify them (they came first, and a
    # "88x lower" read before "the runs differ in trace")
    sec.text += [_headline_line(labels[0], sums[0], lab, s)
                 for lab, s in zip(labels[1:], sums[1:], strict=True)]
    if len(bases) == 1 and time_note(sums):
        sec.text.append("Times: simulated time (" + ", ".join(
            sorted({(s.get("time_base") or {}).get("kind", "") for s in sums})) + ").")
    values = comparison_values(sums)
    table = format_table(values)
    overall = [s.get("overall") or {} for s in sums]
    rows = [[row_label(str(name), overall), *map(str, row)]
            for name, row in zip(values.index, table.to_numpy(), strict=True)]
    n = len(labels)
    # each change's verdict, by row and by the change's place among the changes (0..n-2);
    # none for a change of or against a run that did not complete: a run cut short looks
    # cheaper (and its throughput lower) than any whole run
    whole = [k for k in range(1, n) if not run_ended(sums[0]) and not run_ended(sums[k])]
    judged = {}
    for i, (name, vals) in enumerate(values.iterrows()):
        base = None if math.isnan(vals.iloc[0]) else float(vals.iloc[0])
        for k in whole:
            cand = None if math.isnan(vals.iloc[k]) else float(vals.iloc[k])
            v = verdict(metric(str(name)), base, cand)
            if v is not None:
                judged[i, k - 1] = v
    if n > 1:
        sec.text.append("Each change is marked better or worse by its metric's own "
                        "direction (in report.html, green or red); the potential hit rate "
                        "and the API-price costs are the workload's, not judged" + (
                            ", nor a change of or against a run that did not complete."
                            if len(whole) < n - 1 else "."))
    if n <= WIDE_RUNS:
        sec.tables.append((["metric", *table.columns], rows))
        sec.marks[0] = {(i, n + 1 + k): v for (i, k), v in judged.items()}
    else:  # values, then changes: one table of 2n columns runs off the page
        sec.tables.append((["metric", *table.columns[:n]], [r[:n + 1] for r in rows]))
        sec.tables.append(([f"change vs {labels[0]}", *labels[1:]],
                           [[r[0], *r[n + 1:]] for r in rows]))
        sec.marks[1] = {(i, 1 + k): v for (i, k), v in judged.items()}
    sec.strong = {metric(n).label for n in KEY_ROWS if n in values.index}
    return sec


def _headline_line(ref: str, base: dict[str, Any], lab: str, cand: dict[str, Any]) -> str:
    """``lab vs ref:`` and the headline changes; a run that did not complete is said, its
    changes not judged (``_comparison_section``), and a pair with no figure in common says
    so rather than ending the line empty."""
    said = headline(base, cand)
    ended = [name for name, s in ((ref, base), (lab, cand)) if run_ended(s)]
    note = f"not judged: {' and '.join(ended)} did not complete" if ended else ""
    if not said:
        return f"{lab} vs {ref}: {note + ', and ' if note else ''}{NO_COMMON_FIGURE}"
    return f"{lab} vs {ref}: {said}{f' ({note})' if note else ''}"


def _where_section(named: Sequence[tuple[str, dict[str, Any]]], key: str) -> list[Section]:
    """Where simulated requests' time went (none for real endpoints' runs)."""
    chart = charts.where_time_goes(named)
    if chart is None:
        return []
    left = [lab for lab, s in named if not (s.get("overall") or {}).get("time_breakdown")]
    text = ["Mean per successful request, from the simulator's own stamps: waiting for an "
            "instance, prefill steps, tier loads, and with prefill/decode disaggregation the "
            "KV transfer and the wait for a decode instance, then decode (docs/metrics.md)."]
    if left:
        text.append(f"Not shown: {', '.join(left)} (no simulator stamps: a real endpoint, "
                    "the HTTP simulator, or no successful request).")
    return [Section("Where time goes (simulated)", text=text,
                    figures=[(f"{key}where_time_goes.png", "where time goes", chart)])]


def sections_for(runs: Sequence[Run]) -> list[Section]:
    """Everything the report shows, in order."""
    labels = run_labels([r.summary for r in runs])
    if len(runs) == 1:
        r = runs[0]
        return [*requests_sections(r, labels[0], ""), latency_figures(runs, labels, ""),
                *_where_section([(labels[0], r.summary)], ""),
                curve_figures(runs, labels, ""), timeline_figure(r, ""),
                agents_section(r, ""), cost_section(r), errors_section(r),
                scenario_section(r)]
    sums = [r.summary for r in runs]
    named = list(zip(labels, sums, strict=True))
    agentx = Section("Throughput per GPU against interactivity (AgentX)", text=[
        "Each point is one sweep stage of one run; up and to the right is better. Ringed "
        "points, joined by the grey band, are the Pareto front: no other point beats them "
        "on both axes."],
        figures=[agentx_figure(named, "cmp_")])
    agentx.text.extend(charts.left_out(named))
    sweep = any(len(s.get("stages", {})) > 1 for s in sums)
    if sweep:
        agentx.text.extend(charts.left_out(named, "e2e_p50"))
        agentx.figures.append((
            "cmp_pareto_e2e.png", "Pareto: throughput/GPU vs P50 E2E", charts.agentx(
                named, "Throughput per GPU vs P50 E2E, per sweep stage", x_metric="e2e_p50",
                time_note=time_note(sums))))
    latency = latency_figures(runs, labels, "cmp_")
    # a sweep is read on the AgentX chart first; one point per run says less there than the
    # latency distributions, where a cache or routing change shows
    out = [_comparison_section(runs, labels), *((agentx, latency) if sweep else
                                                (latency, agentx)),
           *_where_section(named, "cmp_"), curve_figures(runs, labels, "cmp_")]
    descs = {str(s.get("run", {}).get("description") or "") for s in sums}
    if len(descs) == 1 and descs != {""}:
        out[0].text.insert(0, descs.pop().strip())
        descs = set()
    t_max = max(end_s(r) for r in runs) or None
    for i, (lab, r) in enumerate(zip(labels, runs, strict=True)):
        sc = r.summary.get("run", {})
        desc = f": {sc.get('description') or ''}" if descs else ""
        sec = Section(f"Run {lab}", text=[
            f"run {sc.get('run_id') or '-'}; scenario {sc.get('name') or '-'}{desc}",
            *time_lines(r.summary), *validity_lines(r.summary),
            f"stages: {', '.join(sc.get('stages', []))}; endpoints: "
            f"{', '.join(sc.get('endpoints', []))}"])
        lane = swimlane_figure(r, lab, f"cmp_{i}_", t_max)
        if lane is not None:
            sec.figures.append(lane)
        out.append(sec)
    return out


def render(run_dirs: Sequence[str | Path | Run], out_dir: str | Path | None = None
           ) -> tuple[Path, Path]:
    """Write report.html and report.md (and plots/*.png) for one run or several (folders,
    or runs already loaded); the output folder defaults to the run's own folder (one run)
    or ./report (several)."""
    runs = [d if isinstance(d, Run) else load(d) for d in run_dirs]
    out = Path(out_dir) if out_dir else (Path(runs[0].path) if len(runs) == 1
                                         else Path("report"))
    for name in ("report.html", "report.md"):  # checked before anything is made
        if (out / name).is_dir():
            raise InputError("is a folder where the report writes its file; move it away",
                             source=str(out / name), field="--output")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "plots").mkdir(exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        raise InputError("is a file, not a folder (or a file is in its path)",
                         source=str(e.filename or out), field="--output") from None
    except OSError as e:  # /proc/x, a read-only or unwritable folder: bad input, as run's -o
        raise InputError(f"cannot make the report's folder ({e.strerror or e})",
                         source=str(e.filename or out), field="--output") from None
    labels = run_labels([r.summary for r in runs])
    # a comparison's labels drop the name part every run shares; the title says it, or
    # two comparisons of one scenario (pd-ratio's codex and agentx runs) read the same
    shared = shared_name([r.summary for r in runs]) if len(runs) > 1 else ""
    title = f"agentbench: {labels[0]}" if len(runs) == 1 else \
        f"agentbench: {shared + ': ' if shared else ''}{' vs '.join(labels)}"
    sections = sections_for(runs)
    for sec in sections:
        for fname, _, png in sec.figures:
            _write(out / "plots" / fname, png)
    html_path = out / "report.html"
    md_path = out / "report.md"
    _write(html_path, to_html(title, sections).encode("utf-8"))
    _write(md_path, to_markdown(title, sections).encode("utf-8"))
    return html_path, md_path


def _write(path: Path, data: bytes) -> None:
    """``path``'s bytes; a failed write names the file (a full disk or a file-size limit
    fails in ``write``, whose error, unlike ``open``'s, names none)."""
    try:
        path.write_bytes(data)
    except OSError as e:
        if e.filename is None:
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise
