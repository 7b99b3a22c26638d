"""The sections of a one-run report (``agentbench.report.render`` lays them out): the
headline (a sweep's stages side by side), AgentX's headline, agents, cost, errors, and the
scenario; and the lines on time base, validity and GPUs that a comparison repeats per run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentbench.metrics.catalog import HEADLINE, METRICS, format_value
from agentbench.metrics.format import run_ended
from agentbench.metrics.run import Run
from agentbench.report import charts, plots
from agentbench.report.compare import metric
from agentbench.report.figures import measured, swimlane_figure, time_note
from agentbench.report.page import Section

STAGE_METRICS = ("throughput_per_gpu", "input_throughput_per_gpu",
                 "output_throughput_per_gpu", "ttft_p50", "ttft_p90", "e2e_p50", "tpot_p50",
                 "interactivity_p50", "hit_rate", "goodput", "error_rate")


# the headline table's rows, grouped: throughput, latency, cache, agents, cost, errors
HEADLINE_ORDER = ("throughput", "throughput_per_gpu", "input_throughput_per_gpu",
                  "output_throughput_per_gpu", "interactivity_p50", "ttft_p50", "ttft_p90",
                  "ttft_p99", "tpot_p50", "itl_p50", "e2e_p50", "e2e_p99",
                  "schedule_lag_p99", "hit_rate_potential", "hit_rate",
                  "achieved_over_potential", "hit_rate_server", "goodput", "agent_goodput",
                  "makespan_p50", "llm_wait_p50", "cost_per_agent", "cost_per_mtok",
                  "error_rate")


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


def requests_sections(run: Run, label: str, key: str) -> list[Section]:
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
    rows = [*HEADLINE, "ttft_p99", "e2e_p99", "itl_p50", "hit_rate_potential",
            "achieved_over_potential", "agent_goodput", "llm_wait_p50", "cost_per_agent",
            "schedule_lag_p99"]
    if len(stages) > 1:  # and every row the stage table it replaces had
        rows += [n for n in STAGE_METRICS if n not in rows]
    # grouped as the comparison's rows are (P99 TTFT beside P50 TTFT, not after the
    # error rate); a row the grouping does not name keeps its place after them
    rows.sort(key=lambda n: HEADLINE_ORDER.index(n) if n in HEADLINE_ORDER
              else len(HEADLINE_ORDER))
    head.tables.append(_table_rows(blocks, rows))
    head.text.extend(validity_lines(s))
    head.text.extend(_gpus_lines(s))
    out = [head]
    if s.get("agentx"):
        out.append(_agentx_section(s, label, key))
    # the stages' figures are in the headline; their chart, unless AgentX's section has it
    if len(stages) > 1 and len(s.get("agentx") or []) <= 1:
        sweep = Section("Sweep stages", figures=[agentx_figure([(label, s)], key)])
        sweep.text.extend(charts.left_out([(label, s)]))
        out.append(sweep)
    if len(s.get("endpoints", {})) > 1:
        out.append(Section("Endpoints", tables=[_table_rows(s["endpoints"], STAGE_METRICS)]))
    return out


def validity_lines(summary: dict[str, Any]) -> list[str]:
    """The rules' verdict and its reasons (nothing for a run without rules); a detail
    that is a warning (a stage's load far below its label) is a ``Warning:`` line, which
    the page sets apart as it does every warning (it read as plain prose)."""
    v = summary.get("validity")
    if not v:
        return []
    verdict = "valid" if v["valid"] else "INVALID: " + ", ".join(v["reasons"])
    return [f"Validity under rules {v.get('rules')}: {verdict}.",
            *(f"Warning: {d[len('warning: '):]}." if d.startswith("warning: ") else f"{d}."
              for d in v.get("details", []))]


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
        sec.figures.append(agentx_figure([(label, s)], f"{key}rules_"))
    return sec


def agentx_figure(named: Sequence[tuple[str, dict[str, Any]]], key: str
                   ) -> tuple[str, str, bytes]:
    return (f"{key}agentx.png", "AgentX: throughput per GPU vs interactivity", charts.agentx(
        named, "Throughput per GPU vs interactivity, per sweep stage",
        time_note=time_note([s for _, s in named])))


def agents_section(run: Run, key: str) -> Section:
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


def cost_section(run: Run) -> Section:
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


def errors_section(run: Run) -> Section:
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


def scenario_section(run: Run) -> Section:
    info = dict(run.records.run)
    return Section("Scenario and environment", pre=json.dumps(info, indent=2, default=str))
