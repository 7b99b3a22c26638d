"""``agentbench report``: a self-contained report.html (plots embedded as base64 PNG) and a
report.md (plots beside it in plots/) for one run or a comparison of several. It formats
summaries; raw rows are read only to draw distributions and timelines. Every string that
comes from a trace or a scenario is escaped."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.metrics.catalog import HEADLINE, METRICS, format_value
from agentbench.metrics.format import run_ended
from agentbench.metrics.run import Run, load
from agentbench.report import charts, plots
from agentbench.report.compare import (
    KEY_ROWS,
    comparison_values,
    format_table,
    headline,
    metric,
    run_labels,
    verdict,
)
from agentbench.report.figures import (
    curve_figures,
    end_s,
    latency_figures,
    measured,
    swimlane_figure,
    time_note,
    timeline_figure,
)
from agentbench.report.page import Section, to_html, to_markdown

STAGE_METRICS = ("throughput_per_gpu", "input_throughput_per_gpu",
                 "output_throughput_per_gpu", "ttft_p50", "ttft_p90", "e2e_p50", "tpot_p50",
                 "interactivity_p50", "hit_rate", "goodput", "error_rate")


def row_label(name: str, blocks: Sequence[dict[str, Any]]) -> str:
    """A row's label; goodput's reads "(no SLOs)" when no block set one: it is then the
    share that succeeded, and 100% says nothing of latency."""
    label = metric(name).label
    if name in ("goodput", "agent_goodput") and not any(
            (b.get("goodput") or {}).get("slos") for b in blocks):
        return f"{label} (no SLOs)"
    return label


def _table_rows(blocks: dict[str, dict[str, Any]], metrics: Sequence[str]
                ) -> tuple[list[str], list[list[str]]]:
    names = list(blocks)
    rows = []
    for n in metrics:
        m = metric(n)
        vals = [m.value(b) for b in blocks.values()]
        if all(v is None for v in vals):
            continue
        rows.append([row_label(n, list(blocks.values())), *(format_value(m, v) for v in vals)])
    return ["metric", *names], rows


def time_lines(summary: dict[str, Any]) -> list[str]:
    """The summary's time base (simulated or wall-clock), its note and warnings."""
    tb = summary.get("time_base") or {}
    why = run_ended(summary)
    ended = [f"Warning: {why}."] if why else []
    if not tb:
        return ended
    kind = ("virtual time (simulated)" if tb.get("kind") == "virtual" else
            f"simulated time, speedup {tb.get('speedup'):g}x" if tb.get("kind") == "simulated"
            else "wall-clock time")
    note = str(tb.get("note") or "")
    text = (f"Times: {note}." if note.startswith(kind) else
            f"Times: {kind}. {note[:1].upper()}{note[1:]}" if note else f"Times: {kind}.")
    return [text, *ended, *(f"Warning: {w}" for w in tb.get("warnings", []))]


def _gpus_lines(s: dict[str, Any]) -> list[str]:
    """Where the GPU count behind every per-GPU figure and the self-hosted cost comes
    from (for a real endpoint, the scenario's word alone)."""
    run = s.get("run") or {}
    gpus, src = run.get("gpus"), run.get("gpus_source")
    if gpus is None or not src:
        return []
    return [f"Per-GPU figures and self-hosted cost count {gpus:g} "
            f"GPU{'' if gpus == 1 else 's'}: {src}."]


def _requests_sections(run: Run, label: str, key: str) -> list[Section]:
    s = run.summary
    o = s["overall"]
    r = o["requests"]
    head = Section("Headline", text=[*time_lines(s),
        f"{r['total']:,} measured requests ({r['ok']:,} ok, {r['failed']:,} failed, "
        f"{r['cancelled']:,} cancelled); {s.get('warmup_requests_excluded', 0):,} warmup "
        f"requests excluded; measured window {o['window_s']:,.1f} s; "
        f"{o['agents']['trees']:,} session trees ({o['agents']['completed']:,} completed, "
        f"{o['agents'].get('failed', 0):,} failed, {o['agents'].get('cut', 0):,} cut by the "
        "run bound)."])
    # a sweep's stages are its load points: each its own column, the pooled figure last,
    # named as what it is (it belongs to no load point)
    stages = s.get("stages", {})
    blocks = {**stages, "all stages, pooled": o} if len(stages) > 1 else {"overall": o}
    if len(stages) > 1:
        head.text.append(f"{len(stages)} stages, each a load point: read a stage's column; "
                         "the pooled one mixes them.")
    head.tables.append(_table_rows(blocks, [*HEADLINE, "ttft_p99", "e2e_p99",
                                                    "itl_p50", "hit_rate_potential",
                                                    "achieved_over_potential",
                                                    "agent_goodput", "llm_wait_p50",
                                                    "cost_per_agent", "schedule_lag_p99"]))
    head.text.extend(validity_lines(s))
    head.text.extend(_gpus_lines(s))
    out = [head]
    if s.get("agentx"):
        out.append(_agentx_section(s, label, key))
    # the stages' figures are in the headline; their chart, unless AgentX's section has it
    if len(stages) > 1 and len(s.get("agentx") or []) <= 1:
        sweep = Section("Sweep stages", figures=[_agentx_figure([(label, s)], key)])
        sweep.text.extend(charts.left_out([(label, s)]))
        out.append(sweep)
    if len(s.get("endpoints", {})) > 1:
        out.append(Section("Endpoints", tables=[_table_rows(s["endpoints"], STAGE_METRICS)]))
    return out


def validity_lines(summary: dict[str, Any]) -> list[str]:
    """The rules' verdict and its reasons (nothing for a run without rules)."""
    v = summary.get("validity")
    if not v:
        return []
    verdict = "valid" if v["valid"] else "INVALID: " + ", ".join(v["reasons"])
    return [f"Validity under rules {v.get('rules')}: {verdict}.",
            *(f"{d}." for d in v.get("details", []))]


#: the AgentX headline columns (metrics.validity.agentx_headline), with their formats
_AGENTX_COLS = (("total_tok_s_per_gpu", "tok/s per GPU", ",.0f"),
                ("interactivity_tok_s_p50", "tok/s per user (p50)", ",.1f"),
                ("ttft_ms_p50", "TTFT p50 ms", ",.0f"), ("ttft_ms_p90", "TTFT p90 ms", ",.0f"),
                ("e2e_ms_p50", "E2E p50 ms", ",.0f"), ("e2e_ms_p90", "E2E p90 ms", ",.0f"),
                ("hit_rate_theoretical", "hit rate, theoretical", "%"),
                ("hit_rate_actual", "hit rate, actual", "%"),
                ("self_hosted_usd_per_mtok", "$/Mtok self-hosted", ",.3f"),
                ("api_usd_per_mtok", "$/Mtok API", ",.3f"),
                ("api_over_self_hosted", "API / self-hosted", ",.2f"),
                ("context_overflow_rate", "context overflow", "%"))


def _agentx_section(s: dict[str, Any], label: str, key: str) -> Section:
    """The AgentX headline per concurrency point, and the Pareto chart across the sweep."""
    def cell(v: Any, fmt: str) -> str:
        return "-" if v is None else f"{100 * v:.1f}%" if fmt == "%" else f"{v:{fmt}}"

    rows = [[name, *(cell(r[k], fmt) for r in s["agentx"])] for k, name, fmt in _AGENTX_COLS]
    sec = Section("AgentX headline", text=[
        "One column per concurrency point (sweep stage); warmup requests excluded. "
        "Theoretical hit rate: the trace's potential (infinite cache); actual: the server's "
        "usage (else its Prometheus counters)."],
        tables=[(["", *(r["stage"] for r in s["agentx"])], rows)])
    if len(s["agentx"]) > 1:
        sec.figures.append(_agentx_figure([(label, s)], f"{key}rules_"))
    return sec


def _agentx_figure(named: Sequence[tuple[str, dict[str, Any]]], key: str
                   ) -> tuple[str, str, bytes]:
    return (f"{key}agentx.png", "AgentX: throughput per GPU vs interactivity", charts.agentx(
        named, "Throughput per GPU vs interactivity, per sweep stage",
        time_note=time_note([s for _, s in named])))


def _agents_section(run: Run, key: str) -> Section:
    t = run.summary.get("trees", {})
    sec = Section("Agents (session trees)")
    ids = t.get("tree_id", [])
    if not ids:
        sec.text.append("No session tree was measured.")
        return sec
    lane = swimlane_figure(run, "", key)
    if lane is not None:
        sec.figures.append(lane)
    note = time_note([run.summary])
    mk = np.array([np.nan if v is None else v for v in t["makespan_s"]], dtype=np.float64)
    order = np.argsort(-np.nan_to_num(mk))[:40]
    labels = [f"{t['stage'][i]} {ids[i]}" for i in order]
    sec.figures.append((f"{key}makespan.png", "makespan per agent", plots.bars(
        labels, [float(np.nan_to_num(mk[i])) for i in order], f"makespan, s{note}",
        f"Agent makespan (longest {len(order)} of {len(ids)})")))
    g = run.summary["overall"].get("goodput") or {}
    if g.get("agents_judged"):
        missed = g.get("agents_missed_by") or {}
        sec.text.append(
            f"{g.get('good_agents', 0):,} of {g['agents_judged']:,} judged agents good "
            f"({100 * float(g.get('agents') or 0):.1f}%)"
            + ("; the others missed " + ", ".join(f"{k} x{v:,}" for k, v in missed.items())
               if missed else "") + ".")
    a = run.summary["overall"]["agents"]
    sec.tables.append((["", "p50", "p90", "p99", "mean", "count"], [
        [name, *(format_value(METRICS["makespan_p50"], a[k][q])
                 for q in ("p50", "p90", "p99", "mean")), str(a[k]["count"])]
        for name, k in (("makespan", "makespan_s"), ("LLM wait", "llm_wait_s"))]))
    return sec


def _cost_section(run: Run) -> Section:
    """Every cost figure the catalog names (the catalog is where cost is defined)."""
    o = run.summary["overall"]
    rows = [[m.label, format_value(m, m.value(o))] for m in METRICS.values()
            if m.path[:1] == ("cost",) and m.value(o) is not None]
    sec = Section("Cost", tables=[(["", "value"], rows)] if rows else [])
    c = o.get("cost") or {}
    if c.get("gpus") is not None and c.get("gpu_hour_usd") is not None:
        sec.text.append(f"{c['gpus']:g} GPUs at ${c['gpu_hour_usd']:,.2f} per GPU-hour.")
    if not rows:
        sec.text.append("No cost: the scenario sets no GPU-hour price.")
    return sec


def _errors_section(run: Run) -> Section:
    r = run.summary["overall"]["requests"]
    sec = Section("Errors")
    if not r["errors"]:
        sec.text.append("No measured request failed.")
        return sec
    q = measured(run)
    failed = q[(q["status"] != "ok").to_numpy(dtype=bool)]
    examples = failed.groupby(failed["error_type"].fillna("unknown"))["error_message"].first()
    rows = [[e["error_type"], "-" if e["http_status"] is None else str(int(e["http_status"])),
             f"{e['count']:,}", str(examples.get(e["error_type"], "") or "")[:200]]
            for e in r["errors"]]
    sec.tables.append((["error type", "HTTP status", "requests", "example message"], rows))
    return sec


def _scenario_section(run: Run) -> Section:
    info = dict(run.records.run)
    return Section("Scenario and environment", pre=json.dumps(info, indent=2, default=str))


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


def _comparison_section(runs: Sequence[Run], labels: Sequence[str]) -> Section:
    sums = [r.summary for r in runs]
    sec = Section("Comparison", text=[
        f"Reference: {labels[0]} (the first run given, or --reference); every change is "
        "against it.", *(
            _headline_line(labels[0], sums[0], lab, s)
            for lab, s in zip(labels[1:], sums[1:], strict=True))])
    differ = workload_differences(runs)
    if differ is not None:
        sec.text.append(f"Warning: {differ}")
    cut = [f"{lab} ({s['run'].get('status')})" for lab, s in zip(labels, sums, strict=True)
           if run_ended(s)]
    if cut:  # a run cut short looks faster and cheaper than it is
        whose = "their figures cover" if len(cut) > 1 else "its figures cover"
        sec.text.append(f"Warning: {', '.join(cut)} did not complete: {whose} part of the "
                        "run (agentbench gate refuses such runs).")
    bases = {json.dumps({k: (s.get("time_base") or {}).get(k) for k in ("kind", "speedup")})
             for s in sums}
    if len(bases) > 1:
        sec.text.append("Warning: the runs are in different time bases (simulated at "
                        "different speedups, or wall-clock); see each run's section.")
    elif time_note(sums):
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
        return (f"{lab} vs {ref}: {note + ', and ' if note else ''}no headline figure is in "
                "both (no successful measured request in one of them)")
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
        return [*_requests_sections(r, labels[0], ""), latency_figures(runs, labels, ""),
                *_where_section([(labels[0], r.summary)], ""),
                curve_figures(runs, labels, ""), timeline_figure(r, ""),
                _agents_section(r, ""), _cost_section(r), _errors_section(r),
                _scenario_section(r)]
    sums = [r.summary for r in runs]
    named = list(zip(labels, sums, strict=True))
    agentx = Section("Throughput per GPU against interactivity (AgentX)", text=[
        "Each point is one sweep stage of one run; up and to the right is better. Ringed "
        "points, joined by the grey band, are the Pareto front: no other point beats them "
        "on both axes."],
        figures=[_agentx_figure(named, "cmp_")])
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
    labels = run_labels([r.summary for r in runs])
    title = f"agentbench: {labels[0]}" if len(runs) == 1 else \
        f"agentbench: {' vs '.join(labels)}"
    sections = sections_for(runs)
    for sec in sections:
        for fname, _, png in sec.figures:
            (out / "plots" / fname).write_bytes(png)
    html_path = out / "report.html"
    md_path = out / "report.md"
    html_path.write_text(to_html(title, sections), encoding="utf-8")
    md_path.write_text(to_markdown(title, sections), encoding="utf-8")
    return html_path, md_path
