"""``agentbench report``: a self-contained report.html (plots embedded as base64 PNG) and a
report.md (plots beside it in plots/) for one run or a comparison of several. It formats
summaries; raw rows are read only to draw distributions and timelines. Every string that
comes from a trace or a scenario is escaped."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.api import Run, load
from agentbench.metrics.catalog import HEADLINE, METRICS, format_value
from agentbench.report import plots
from agentbench.report.compare import comparison_table, headline, run_labels

STAGE_METRICS = ("throughput_per_gpu", "ttft_p50", "ttft_p90", "e2e_p50", "tpot_p50",
                 "interactivity_p50", "hit_rate", "goodput", "error_rate")


@dataclass
class Section:
    title: str
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    figures: list[tuple[str, str, bytes]] = field(default_factory=list)  # (file, alt, png)
    pre: str | None = None


def _table_rows(blocks: dict[str, dict[str, Any]], metrics: Sequence[str]
                ) -> tuple[list[str], list[list[str]]]:
    names = list(blocks)
    rows = []
    for n in metrics:
        m = METRICS[n]
        vals = [m.value(b) for b in blocks.values()]
        if all(v is None for v in vals):
            continue
        rows.append([m.label, *(format_value(m, v) for v in vals)])
    return ["metric", *names], rows


def time_lines(summary: dict[str, Any]) -> list[str]:
    """The summary's time base (simulated or wall-clock), its note and warnings."""
    tb = summary.get("time_base") or {}
    if not tb:
        return []
    kind = ("virtual time (simulated)" if tb.get("kind") == "virtual" else
            f"simulated time, speedup {tb.get('speedup'):g}x" if tb.get("kind") == "simulated"
            else "wall-clock time")
    return [f"Times: {kind}. {tb.get('note', '')}",
            *(f"Warning: {w}" for w in tb.get("warnings", []))]


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
    head.tables.append(_table_rows({"overall": o}, [*HEADLINE, "ttft_p99", "e2e_p99",
                                                    "itl_p50", "hit_rate_potential",
                                                    "achieved_over_potential",
                                                    "agent_goodput", "llm_wait_p50",
                                                    "cost_per_agent", "schedule_lag_p99"]))
    out = [head]
    if len(s.get("stages", {})) > 1:
        out.append(Section("Sweep stages", tables=[_table_rows(s["stages"], STAGE_METRICS)]))
    if len(s.get("endpoints", {})) > 1:
        out.append(Section("Endpoints", tables=[_table_rows(s["endpoints"], STAGE_METRICS)]))
    return out


def _measured(run: Run) -> Any:
    req = run.requests
    return req[(req["phase"] == "measure").to_numpy(dtype=bool)]


def _latency_figures(runs: Sequence[Run], labels: Sequence[str], key: str) -> Section:
    sec = Section("Latency distributions")
    reqs = [_measured(r) for r in runs]
    ok = [q[(q["status"] == "ok").to_numpy(dtype=bool)] for q in reqs]
    for col, name in (("ttft_ms", "TTFT"), ("e2e_ms", "E2E")):
        png = plots.cdf([(lab, q[col].to_numpy(dtype=np.float64))
                         for lab, q in zip(labels, ok, strict=True)], f"{name}, ms",
                        f"{name} CDF (successful measured requests)")
        sec.figures.append((f"{key}{col}_cdf.png", f"{name} CDF", png))
    return sec


def _curve_figures(runs: Sequence[Run], labels: Sequence[str], key: str) -> Section:
    sec = Section("The agentic curves: context length and turn index")
    ctx = [(lab, r.summary["by_context"]) for lab, r in zip(labels, runs, strict=True)]
    turn = [(lab, r.summary["by_turn"]) for lab, r in zip(labels, runs, strict=True)]

    def xs(rows: list[dict[str, Any]], k: str) -> list[float]:
        return [max(float(x[k]), 1.0) if k == "context_lo" else float(x[k]) for x in rows]

    sec.figures.append((f"{key}ttft_vs_context.png", "TTFT vs context", plots.lines(
        [(f"{lab} p50", xs(rows, "context_lo"), [x["ttft_ms_p50"] for x in rows])
         for lab, rows in ctx] +
        [(f"{lab} p90", xs(rows, "context_lo"), [x["ttft_ms_p90"] for x in rows])
         for lab, rows in ctx],
        "context length, tokens (bucket start)", "TTFT, ms", "TTFT vs context length",
        logx=True)))
    sec.figures.append((f"{key}hit_vs_context.png", "hit rate vs context", plots.lines(
        [(lab, xs(rows, "context_lo"), [x["hit_rate"] for x in rows]) for lab, rows in ctx] +
        [(f"{lab} potential", xs(rows, "context_lo"), [x["potential_hit_rate"] for x in rows])
         for lab, rows in ctx], "context length, tokens (bucket start)", "hit rate, %",
        "Prefix cache hit rate vs context length", logx=True, percent=True)))
    sec.figures.append((f"{key}ttft_vs_turn.png", "TTFT vs turn", plots.lines(
        [(lab, xs(rows, "turn"), [x["ttft_ms_p50"] for x in rows]) for lab, rows in turn],
        "turn index", "TTFT p50, ms", "TTFT vs turn index")))
    sec.figures.append((f"{key}hit_vs_turn.png", "hit rate vs turn", plots.lines(
        [(lab, xs(rows, "turn"), [x["hit_rate"] for x in rows]) for lab, rows in turn] +
        [(f"{lab} potential", xs(rows, "turn"), [x["potential_hit_rate"] for x in rows])
         for lab, rows in turn], "turn index", "hit rate, %",
        "Prefix cache hit rate vs turn index", percent=True)))
    return sec


def _timeline_figure(run: Run, key: str) -> Section:
    q = _measured(run)
    sec = Section("Throughput and requests in flight")
    sent = q["sent_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    end = q["end_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    keep = ~np.isnan(sent) & ~np.isnan(end)
    if not keep.any():
        sec.text.append("No measured request was sent.")
        return sec
    f = float((run.summary.get("time_base") or {}).get("factor", 1.0))  # the summary's time base
    sent, end = sent[keep] / 1e9 * f, end[keep] / 1e9 * f
    ok = (q["status"] == "ok").to_numpy(dtype=bool)[keep]
    tok = (q["context_tokens"].to_numpy(dtype=np.float64)
           + np.nan_to_num(q["output_tokens"].to_numpy(dtype=np.float64)))[keep]
    t0, t1 = sent.min(), end.max()
    edges = np.linspace(t0, t1, 121)
    width = max(edges[1] - edges[0], 1e-9)
    done = np.histogram(end[ok], bins=edges, weights=tok[ok])[0] / width
    starts = np.searchsorted(np.sort(sent), edges[:-1], side="right")
    ends = np.searchsorted(np.sort(end), edges[:-1], side="right")
    sec.figures.append((f"{key}timeline.png", "throughput and in-flight timeline",
                        plots.timeline(edges[:-1], done, (starts - ends).astype(float),
                                       "Throughput and requests in flight")))
    return sec


def _agents_section(run: Run, key: str) -> Section:
    t = run.summary.get("trees", {})
    sec = Section("Agents (session trees)")
    ids = t.get("tree_id", [])
    if not ids:
        sec.text.append("No session tree was measured.")
        return sec
    mk = np.array([np.nan if v is None else v for v in t["makespan_s"]], dtype=np.float64)
    order = np.argsort(-np.nan_to_num(mk))[:40]
    labels = [f"{t['stage'][i]} {ids[i]}" for i in order]
    sec.figures.append((f"{key}makespan.png", "makespan per agent", plots.bars(
        labels, [float(np.nan_to_num(mk[i])) for i in order], "makespan, s",
        f"Agent makespan (longest {len(order)} of {len(ids)})")))
    a = run.summary["overall"]["agents"]
    sec.tables.append((["", "p50", "p90", "p99", "mean", "count"], [
        [name, *(format_value(METRICS["makespan_p50"], a[k][q])
                 for q in ("p50", "p90", "p99", "mean")), str(a[k]["count"])]
        for name, k in (("makespan", "makespan_s"), ("LLM wait", "llm_wait_s"))]))
    return sec


def _cost_section(run: Run) -> Section:
    c = run.summary["overall"]["cost"]

    def usd(x: Any) -> str:
        return "-" if x is None else f"${x:,.4f}"

    rows = [["GPU-hour price", usd(c.get("gpu_hour_usd"))], ["GPUs", str(c.get("gpus"))],
            ["self-hosted cost of the window", usd(c.get("self_hosted_usd"))],
            ["per agent", usd(c.get("per_agent_usd"))],
            ["per Mtok (total)", usd(c.get("per_mtok_total_usd"))],
            ["per Mtok (input)", usd(c.get("per_mtok_input_usd"))],
            ["per Mtok (output)", usd(c.get("per_mtok_output_usd"))],
            ["API-equivalent cost", usd(c.get("api_equivalent_usd"))],
            ["API-equivalent per agent", usd(c.get("api_per_agent_usd"))],
            ["API / self-hosted", "-" if c.get("api_over_self_hosted") is None
             else f"{c['api_over_self_hosted']:.2f}x"]]
    return Section("Cost", tables=[(["", "value"], rows)])


def _errors_section(run: Run) -> Section:
    r = run.summary["overall"]["requests"]
    sec = Section("Errors")
    if not r["errors"]:
        sec.text.append("No measured request failed.")
        return sec
    q = _measured(run)
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


def sections_for(runs: Sequence[Run]) -> list[Section]:
    """Everything the report shows, in order."""
    labels = run_labels([r.summary for r in runs])
    if len(runs) == 1:
        r = runs[0]
        return [*_requests_sections(r, labels[0], ""), _latency_figures(runs, labels, ""),
                _curve_figures(runs, labels, ""), _timeline_figure(r, ""),
                _agents_section(r, ""), _cost_section(r), _errors_section(r),
                _scenario_section(r)]
    sums = [r.summary for r in runs]
    heads = Section("Against the first run", text=[
        f"{lab} vs {labels[0]}: {headline(sums[0], s)}"
        for lab, s in zip(labels[1:], sums[1:], strict=True)])
    bases = {json.dumps({k: (s.get("time_base") or {}).get(k) for k in ("kind", "speedup")})
             for s in sums}
    if len(bases) > 1:
        heads.text.append("Warning: the runs are in different time bases (simulated at "
                          "different speedups, or wall-clock); see each run's section.")
    table = comparison_table(sums)
    heads.tables.append((["metric", *table.columns],
                         [[str(i), *map(str, row)] for i, row in zip(table.index,
                                                                     table.to_numpy(),
                                                                     strict=True)]))
    out = [heads, _latency_figures(runs, labels, "cmp_"), _curve_figures(runs, labels, "cmp_")]
    if any(len(s.get("stages", {})) > 1 for s in sums):
        named = list(zip(labels, sums, strict=True))
        out.append(Section("Sweeps: throughput per GPU against interactivity and latency",
                           figures=[
            ("cmp_pareto_interactivity.png", "Pareto: throughput/GPU vs interactivity",
             plots.pareto(named, "interactivity_p50", "Throughput per GPU vs interactivity")),
            ("cmp_pareto_e2e.png", "Pareto: throughput/GPU vs P50 E2E",
             plots.pareto(named, "e2e_p50", "Throughput per GPU vs P50 E2E"))]))
    for lab, r in zip(labels, runs, strict=True):
        sc = r.summary.get("run", {})
        out.append(Section(f"Run {lab}", text=[
            f"scenario {sc.get('name') or '-'}: {sc.get('description') or ''}",
            *time_lines(r.summary),
            f"stages: {', '.join(sc.get('stages', []))}; endpoints: "
            f"{', '.join(sc.get('endpoints', []))}"], pre=None))
    return out


CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}
img{max-width:100%;display:block;margin:.5em 0}pre{background:#f7f7f7;padding:1em;
overflow:auto;font-size:12px}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}"""


def to_html(title: str, sections: Sequence[Section]) -> str:
    """One self-contained HTML page (no script, no external resource)."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{escape(title)}</h1>"]
    for sec in sections:
        parts.append(f"<h2>{escape(sec.title)}</h2>")
        parts.extend(f"<p>{escape(t)}</p>" for t in sec.text)
        for header, rows in sec.tables:
            parts.append("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in header)
                         + "</tr>")
            parts.extend("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                         for row in rows)
            parts.append("</table>")
        for _, alt, png in sec.figures:
            b64 = base64.b64encode(png).decode("ascii")
            parts.append(f'<img alt="{escape(alt)}" src="data:image/png;base64,{b64}">')
        if sec.pre:
            parts.append(f"<pre>{escape(sec.pre)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _md_cell(x: str) -> str:
    return escape(x).replace("|", "\\|").replace("\n", " ")


def to_markdown(title: str, sections: Sequence[Section]) -> str:
    """The same report in Markdown; images referenced from plots/."""
    lines = [f"# {_md_cell(title)}", ""]
    for sec in sections:
        lines += [f"## {_md_cell(sec.title)}", ""]
        lines += [_md_cell(t) + "\n" for t in sec.text]
        for header, rows in sec.tables:
            lines.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
            lines.append("|" + "---|" * len(header))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            lines.append("")
        lines += [f"![{_md_cell(alt)}](plots/{fname})\n" for fname, alt, _ in sec.figures]
        if sec.pre:
            lines += ["```json", sec.pre.replace("```", "` ` `"), "```", ""]
    return "\n".join(lines)


def render(run_dirs: Sequence[str | Path], out_dir: str | Path | None = None
           ) -> tuple[Path, Path]:
    """Write report.html and report.md (and plots/*.png) for one run or several; the
    output folder defaults to the run's own folder (one run) or ./report (several)."""
    runs = [load(d) for d in run_dirs]
    out = Path(out_dir) if out_dir else (Path(run_dirs[0]) if len(runs) == 1
                                         else Path("report"))
    out.mkdir(parents=True, exist_ok=True)
    labels = run_labels([r.summary for r in runs])
    title = f"agentbench: {labels[0]}" if len(runs) == 1 else \
        f"agentbench: {' vs '.join(labels)}"
    sections = sections_for(runs)
    (out / "plots").mkdir(exist_ok=True)
    for sec in sections:
        for fname, _, png in sec.figures:
            (out / "plots" / fname).write_bytes(png)
    html_path = out / "report.html"
    md_path = out / "report.md"
    html_path.write_text(to_html(title, sections), encoding="utf-8")
    md_path.write_text(to_markdown(title, sections), encoding="utf-8")
    return html_path, md_path
