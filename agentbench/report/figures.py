"""The report's figures of request distributions over time and over the agentic axes
(``agentbench.report.render`` lays them out): latency CDFs, TTFT and hit rate against
context length and turn index, the cache-warmth table, the throughput timeline and the
agents' swim lanes, each with its time axis labelled by the runs' time base."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentbench.metrics.run import Run
from agentbench.report import charts, plots
from agentbench.report.page import Section


def time_note(summaries: Sequence[dict[str, Any]]) -> str:
    """The suffix for every time axis: ' (simulated time)' when all runs ran on a
    simulated clock, ' (mixed time bases)' when some did, '' for wall-clock time."""
    kinds = {(s.get("time_base") or {}).get("kind") or "wall" for s in summaries}
    if kinds <= {"virtual", "simulated"}:
        return " (simulated time)"
    return " (mixed time bases)" if kinds - {"wall"} else ""


def measured(run: Run) -> Any:
    req = run.requests
    return req[(req["phase"] == "measure").to_numpy(dtype=bool)]


def latency_figures(runs: Sequence[Run], labels: Sequence[str], key: str) -> Section:
    sec = Section("Latency distributions")
    note = time_note([r.summary for r in runs])
    reqs = [measured(r) for r in runs]
    ok = [q[(q["status"] == "ok").to_numpy(dtype=bool)] for q in reqs]
    none = [lab for lab, q in zip(labels, ok, strict=True) if q.empty]
    if len(none) == len(runs):  # empty axes would say nothing
        sec.text.append("No measured request succeeded: no latency to draw.")
        return sec
    if none:
        sec.text.append(f"Not drawn: {', '.join(none)} (no successful measured request).")
    for col, name in (("ttft_ms", "TTFT"), ("e2e_ms", "E2E")):
        png = plots.cdf([(lab, q[col].to_numpy(dtype=np.float64))
                         for lab, q in zip(labels, ok, strict=True)], f"{name}, ms{note}",
                        f"{name} CDF (successful measured requests)")
        sec.figures.append((f"{key}{col}_cdf.png", f"{name} CDF", png))
    return sec


MIN_TURN_REQUESTS = 3  # a turn index fewer requests reached is noise in a p50 curve


def curve_figures(runs: Sequence[Run], labels: Sequence[str], key: str) -> Section:
    sec = Section("The agentic curves: context length and turn index")
    note = time_note([r.summary for r in runs])
    ctx = [(lab, r.summary["by_context"]) for lab, r in zip(labels, runs, strict=True)]
    turn = [(lab, [x for x in r.summary["by_turn"]
                   if x.get("requests", MIN_TURN_REQUESTS) >= MIN_TURN_REQUESTS])
            for lab, r in zip(labels, runs, strict=True)]
    one = len(runs) == 1

    def xs(rows: list[dict[str, Any]], k: str) -> list[float]:
        return [max(float(x[k]), 1.0) if k == "context_lo" else float(x[k]) for x in rows]

    def name(lab: str, what: str) -> str:
        return what if one else f"{lab} {what}"

    def pairs(groups: list[tuple[str, list[dict[str, Any]]]], k: str,
              solid: tuple[str, str], dashed: tuple[str, str]) -> list[Any]:
        """Per run, a solid and a dashed line of ``(name, field)`` over ``k``."""
        return [s for i, (lab, rows) in enumerate(groups) for s in (
            (name(lab, solid[0]), xs(rows, k), [x[solid[1]] for x in rows], i),
            (name(lab, dashed[0]), xs(rows, k), [x[dashed[1]] for x in rows], i, True))]

    hit = (("achieved", "hit_rate"), ("potential", "potential_hit_rate"))
    # a run without a successful request has no TTFT: empty axes would say nothing
    ttft = any(x.get("ttft_ms_p50") is not None for _, rows in ctx for x in rows)
    if not ttft:
        sec.text.append("No measured request succeeded: no TTFT to draw against context "
                        "length or turn index.")
    else:
        sec.figures.append((f"{key}ttft_vs_context.png", "TTFT vs context", plots.lines(
            pairs(ctx, "context_lo", ("p50", "ttft_ms_p50"), ("p90", "ttft_ms_p90")),
            "context length, tokens (bucket start)", f"TTFT, ms{note}",
            "TTFT vs context length (solid p50, dashed p90)", logx=True)))
    # nor without a hit rate, achieved or potential, in any group
    rates = any(x.get(f) is not None for _, rows in ctx for x in rows for _, f in hit)
    if not rates:
        sec.text.append("No measured request has a hit rate, achieved or potential: no "
                        "hit rate to draw against context length or turn index.")
    else:
        sec.figures.append((f"{key}hit_vs_context.png", "hit rate vs context", plots.lines(
            pairs(ctx, "context_lo", *hit),
            "context length, tokens (bucket start)", "hit rate, %",
            "Prefix cache hit rate vs context length (solid achieved, dashed potential)",
            logx=True, percent=True)))
    if ttft:
        sec.figures.append((f"{key}ttft_vs_turn.png", "TTFT vs turn", plots.lines(
            [(lab, xs(rows, "turn"), [x["ttft_ms_p50"] for x in rows], i)
             for i, (lab, rows) in enumerate(turn)],
            "turn index", f"TTFT p50, ms{note}",
            f"TTFT vs turn index (turns at least {MIN_TURN_REQUESTS} requests reached)")))
    if rates:
        sec.figures.append((f"{key}hit_vs_turn.png", "hit rate vs turn", plots.lines(
            pairs(turn, "turn", *hit),
            "turn index", "hit rate, %",
            "Prefix cache hit rate vs turn index (solid achieved, dashed potential)",
            percent=True)))
    warm = warmth_table(runs, labels, one)
    if warm is not None:
        sec.tables.append(warm)
    return sec


def warmth_table(runs: Sequence[Run], labels: Sequence[str], one: bool
                  ) -> tuple[list[str], list[list[str]]] | None:
    """TTFT and hit rate of cold, partly cached and warm requests: what a cache hit buys."""
    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:,.1f}"

    def pct(v: Any) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    rows = [[*([] if one else [lab]), str(w["warmth"]), f"{w['requests']:,}",
             ms(w.get("ttft_ms_p50")), ms(w.get("ttft_ms_p90")), ms(w.get("e2e_ms_p50")),
             pct(w.get("hit_rate")), pct(w.get("potential_hit_rate"))]
            for lab, r in zip(labels, runs, strict=True)
            for w in r.summary.get("by_warmth") or []]
    if not rows:
        return None
    head = [*([] if one else ["run"]), "requests by cache warmth", "requests",
            "TTFT p50, ms", "TTFT p90, ms", "E2E p50, ms", "hit rate", "potential"]
    return head, rows


def timeline_figure(run: Run, key: str) -> Section:
    q = measured(run)  # its times are in the run's time base already (Run.requests)
    sec = Section("Throughput and requests in flight")
    sent = q["sent_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    end = q["end_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    keep = ~np.isnan(sent) & ~np.isnan(end)
    if not keep.any():
        sec.text.append("No measured request was sent.")
        return sec
    sent, end = sent[keep] / 1e9, end[keep] / 1e9
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
                                       "Throughput and requests in flight",
                                       time_note([run.summary]))))
    return sec


def end_s(run: Run) -> float:
    """The run's last request end, s (its time base), 0 when none ended."""
    e = run.requests["end_ns"].max()
    return 0.0 if e != e or e is None else float(e) / 1e9


def swimlane_figure(run: Run, label: str, key: str, t_max_s: float | None = None
                     ) -> tuple[str, str, bytes] | None:
    """The lanes of one run over time, warmup included (it shares the lanes)."""
    ses, req = run.sessions, run.requests
    if ses.empty or ses["start_ns"].isna().all() or req["sent_ns"].isna().all():
        return None
    title = f"Agents over time: {label}" if label else "Agents over time"
    return (f"{key}swimlanes.png", f"swim lanes {label}".strip(), charts.swimlane(
        ses, req, title, time_note([run.summary]), t_max_s=t_max_s))
