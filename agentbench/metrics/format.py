"""``format_summary``: one terminal screen of the headline figures after a run."""

from __future__ import annotations

from typing import Any

from agentbench.metrics.groups import WARMTH_NAMES

#: where the GPU count comes from when run.json has no scenario (1, the model's default)
NO_SCENARIO_GPUS = "assumed, since run.json names no scenario to state hardware.gpus"


def _n(x: Any, fmt: str = ",.1f", unit: str = "") -> str:
    return "-" if x is None else f"{x:{fmt}}{unit}"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


_LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E",
           "schedule_lag_ms": "schedule lag"}


def _lat(b: dict[str, Any], key: str, wall: bool = False) -> str:
    d = b["latency"][key]
    return (f"{_LABELS[key]:<14}p50 {_n(d['p50'])}  p90 {_n(d['p90'])}  "
            f"p99 {_n(d['p99'])}  mean {_n(d['mean'])} ms  (n={d['count']:,})"
            + ("  [wall time]" if wall else ""))


def _error_lines(r: dict[str, Any]) -> list[str]:
    """The most common failures (type, HTTP status, count), so a failed run says why; and
    requests whose usage could not be true."""
    bad = r.get("usage_invalid") or 0
    warn = [f"warning       {bad:,} requests reported impossible usage (negative counts, "
            "more cached than prompt tokens, or over 2**31): left out of hit rates and "
            "token splits"] if bad else []
    rows = sorted(r.get("errors") or [], key=lambda e: -e["count"])
    if not rows:
        return warn
    parts = [f"{e['error_type']}" + (f" (HTTP {int(e['http_status'])})"
                                     if e.get("http_status") is not None else "")
             + f" x{e['count']:,}" for e in rows[:3]]
    more = f", +{len(rows) - 3} more kinds" if len(rows) > 3 else ""
    return [f"errors        {', '.join(parts)}{more} (requests.parquet: error_message)", *warn]


def _block_lines(b: dict[str, Any], simulated: bool = False) -> list[str]:
    r = b["requests"]
    t = b["throughput"]
    h = b["hit_rate"]
    a = b["agents"]
    g = b["goodput"]
    c = b["cost"]
    lines = [
        f"requests      {r['total']:,} measured: {r['ok']:,} ok, {r['failed']:,} failed, "
        + (f"{r['cancelled']:,} cancelled by the run's bound, not failures (error rate "
           f"{_pct(r['error_rate'])} of the {r['total'] - r['cancelled']:,} that ended); "
           if r['cancelled'] else
           f"0 cancelled (error rate {_pct(r['error_rate'])}); ")
        + f"window {_n(b['window_s'], ',.1f')} s",
        *_error_lines(r),
        *(_lat(b, k) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")),
        _lat(b, "schedule_lag_ms", wall=simulated),
        f"throughput    {_n(t['total_tok_s'], ',.0f')} tok/s (input {_n(t['input_tok_s'], ',.0f')}"
        f", output {_n(t['output_tok_s'], ',.0f')}); per GPU "
        f"{_n(t['per_gpu_total_tok_s'], ',.0f')} tok/s; {_n(t['requests_per_s'], ',.2f')} req/s",
        f"hit rate      usage {_pct(h['usage']['value'])} "
        f"({h['usage']['requests']:,} requests with usage), "
        f"server {_pct(h['prometheus']['value'])}, potential {_pct(h['potential']['value'])}, "
        f"achieved/potential {_pct(h['achieved_over_potential'])}"
        + _above_potential(h),
        *_load_line(b.get("load")),
        f"agents        {a['trees']:,} trees: {a['completed']:,} completed, "
        f"{a.get('failed', 0):,} failed, {a.get('cut', 0):,} cut by the run's bound; "
        f"completed: makespan p50 {_n(a['makespan_s']['p50'], ',.1f')} s, LLM wait p50 "
        f"{_n(a['llm_wait_s']['p50'], ',.1f')} s" + _slowdown(a.get("slowdown")),
        f"goodput       requests {_pct(g['requests'])}, agents {_pct(g['agents'])}"
        + (f" of {g['agents_judged']:,} completed or failed" if "agents_judged" in g else "")
        + f" (SLOs: {', '.join(f'{k} {v:g}' for k, v in g['slos'].items()) or 'none'})"
        + _missed_line(g),
    ]
    if c.get("self_hosted_usd") is not None or c.get("api_equivalent_usd") is not None:
        lines.extend(_cost_lines(c, b["window_s"]))
    return lines


def _times(r: float | None) -> str:
    """A cost ratio as published comparisons write it: 8.33x, 14.6x, 106x."""
    return "-" if r is None else (f"{r:,.0f}x" if abs(r) >= 100 else f"{r:.3g}x")


def _price(x: float) -> str:
    """A price as written in price lists: $3.00, $0.30, $0.125."""
    return f"${x:,.2f}" if round(x, 2) == x else f"${x:,.4g}"


def _cost_lines(c: dict[str, Any], window_s: float) -> list[str]:
    """Self-hosted cost with what it is made of, then the API-equivalent cost with the
    tokens, prices and provider cache model behind it, and the API/self-hosted ratio."""
    tok = c.get("tokens") or {}
    sh = c.get("token_shares") or {}
    usd = c.get("self_hosted_usd")
    split = (f"input cached {_pct(sh.get('input_cached'))}, uncached "
             f"{_pct(sh.get('input_uncached'))}"
             + (f", cache unknown {_pct(sh.get('input_cache_unknown'))}"
                if tok.get("input_cache_unknown") else "")
             + f"; output {_pct(sh.get('output'))}")
    made = (f" (${c['gpu_hour_usd']:,.2f}/GPU-h x {c['gpus']:g} "
            f"GPU{'' if c['gpus'] == 1 else 's'} x "
            f"{_n(window_s, ',.1f')} s window)"
            if usd is not None else " (no hardware.gpu_hour_usd)")
    lines = [f"cost          self-hosted ${_n(usd, ',.4f')}{made}; "
             f"${_n(c.get('per_agent_usd'), ',.4f')}/agent over "
             f"{_n(c.get('agents_counted'), ',.2f')} agents counted of "
             f"{c.get('agents_ran', 0):,} that ran; "
             f"${_n(c.get('per_mtok_total_usd'), ',.3f')}/Mtok over "
             f"{_n(tok.get('total'), ',.0f')} tokens ({split})"]
    api = c.get("api")
    if api:
        p, t = api["prices"], api["tokens"]
        lines.append(
            f"API cost      ${_n(c['api_equivalent_usd'], ',.4f')} = "
            f"{t['input_uncached']:,.0f} uncached x {_price(p['input_per_mtok'])} + "
            f"{t['input_cached']:,.0f} cached x {_price(p['cached_input_per_mtok'])} + "
            f"{t['output']:,.0f} output x {_price(p['output_per_mtok'])} per Mtok "
            f"(provider cache: {api['cache_model']}, hit {_pct(api['cache_hit_rate'])}); "
            f"API/self-hosted {_times(c.get('api_over_self_hosted'))} "
            f"(${_n(c['api_equivalent_usd'], ',.4f')} / ${_n(usd, ',.4f')})")
    return lines


def run_failure(summary: dict[str, Any], max_error_rate: float | None) -> str | None:
    """Why a run counts as failed (``agentbench run`` exits 1), or None: no measured request
    succeeded, or the error rate passed ``max_error_rate``; with its most common errors."""
    r = summary["overall"]["requests"]
    why = None
    if r["ok"] == 0:
        why = f"no measured request succeeded ({r['total']:,} measured)"
    elif max_error_rate is not None and r["error_rate"] > max_error_rate:
        why = (f"error rate {r['error_rate']:.1%} is over fail_on.error_rate "
               f"{max_error_rate:.1%}")
    if why is None:
        return None
    errs = [e for e in _error_lines(r) if e.startswith("errors")]
    return why + (f"; {errs[0].removeprefix('errors').strip()}" if errs else "")


def run_invalid(summary: dict[str, Any]) -> str | None:
    """Why a run under rules (``rules: agentx``) is not valid (``agentbench run`` exits 3),
    or None: the rules and the verdict's reasons."""
    v = summary.get("validity")
    if not isinstance(v, dict) or v.get("valid", True):
        return None
    return f"not valid under rules {v.get('rules')}: " + ", ".join(v.get("reasons") or [])


#: an error rate that a run not told what to fail on still points out
WARN_ERROR_RATE = 0.10


def run_warning(summary: dict[str, Any], max_error_rate: float | None) -> str | None:
    """A line for a run that passes but failed often (no ``fail_on.error_rate`` set and at
    least WARN_ERROR_RATE of measured requests failed), or None."""
    r = summary["overall"]["requests"]
    if max_error_rate is not None or r["ok"] == 0 or r["error_rate"] < WARN_ERROR_RATE:
        return None
    errs = [e for e in _error_lines(r) if e.startswith("errors")]
    return (f"{r['error_rate']:.1%} of measured requests failed"
            + (f" ({errs[0].removeprefix('errors').strip()})" if errs else "")
            + "; set fail_on.error_rate to make such a run exit 1")


def _validity_lines(summary: dict[str, Any]) -> list[str]:
    """The rules' verdict (with each reason) and the AgentX headline per concurrency
    point; nothing for a run without rules."""
    v = summary.get("validity")
    if not v:
        return []
    verdict = "VALID" if v["valid"] else "INVALID (" + ", ".join(v["reasons"]) + ")"
    out = [f"validity      {v.get('rules')}: {verdict}",
           *(f"              {d}" for d in v.get("details", [])[:6])]
    rows = summary.get("agentx") or []
    if rows:
        out.append("agentx        stage      tok/s/GPU  tok/s/user  TTFT p50/p90 ms  "
                   "E2E p50/p90 ms  hit theory/actual  $/Mtok self/API  overflow")
        for r in rows:
            out.append(
                f"              {r['stage']:<10} {_n(r['total_tok_s_per_gpu'], ',.0f'):>9}  "
                f"{_n(r['interactivity_tok_s_p50'], ',.1f'):>10}  "
                f"{_n(r['ttft_ms_p50'], ',.0f')}/{_n(r['ttft_ms_p90'], ',.0f'):<10} "
                f"{_n(r['e2e_ms_p50'], ',.0f')}/{_n(r['e2e_ms_p90'], ',.0f'):<10} "
                f"{_pct(r['hit_rate_theoretical'])}/{_pct(r['hit_rate_actual']):<10} "
                f"{_n(r['self_hosted_usd_per_mtok'], ',.3f')}/"
                f"{_n(r['api_usd_per_mtok'], ',.3f'):<8} "
                f"{_pct(r['context_overflow_rate'])}")
    return out


#: what a run that did not complete means for its figures, by run.json status
RUN_ENDED = {
    "killed": "it was recovered from its spool and journal, and the agents in progress "
              "have no end, so they count as cut",
    "interrupted": "Ctrl-C or SIGTERM: requests in flight were cancelled",
    "crashed": "see run.json",
    "results_write_failed": "the results disk refused writes; rows that did not fit are "
                            "missing",
}


def run_ended(summary: dict[str, Any]) -> str | None:
    """One sentence for a run that did not complete (terminal summary and report), or
    None."""
    status = (summary.get("run") or {}).get("status")
    if status in (None, "completed"):
        return None
    return (f"the run did not complete (status: {status}): "
            f"{RUN_ENDED.get(status, 'see run.json')}")


def format_summary(summary: dict[str, Any]) -> str:
    """The run's headline figures on one screen (overall, then one line per stage)."""
    run = summary["run"]
    tb = summary.get("time_base") or {}
    simulated = tb.get("kind") == "simulated"
    head = f"run {run.get('run_id')}" + (f" ({run['name']})" if run.get("name") else "")
    if tb.get("kind") == "virtual":
        head += ("; VIRTUAL TIME (replay and simulator on one simulated clock: every time is "
                 "simulated, deterministic for a scenario and seed)")
    elif simulated:
        head += (f"; SIMULATED TIME (speedup {tb.get('speedup'):g}x: server times and the "
                 "window x speedup, rates / speedup; schedule lag in wall time)")
    elif tb:
        head += "; wall-clock time"
    ended = run_ended(summary)
    src = str(run.get("gpus_source") or "")
    gpus = ([src] if src.startswith("hardware.gpus is ")  # a mismatch (validity.py)
            else [f"per-GPU figures count 1 GPU, {src}"] if src == NO_SCENARIO_GPUS else [])
    lines = [head, *(f"warning       {w}" for w in tb.get("warnings", [])),
             *([f"warning       {ended}"] if ended else []),
             *(f"warning       {w}" for w in gpus),
             *_block_lines(summary["overall"], simulated)]
    lines.extend(_warmth_lines(summary.get("by_warmth") or []))
    lines.extend(_where_lines(summary["overall"].get("time_breakdown")))
    lines.extend(_validity_lines(summary))
    if summary.get("warmup_requests_excluded"):
        lines.append(f"warmup        {summary['warmup_requests_excluded']:,} requests excluded")
    for title, group in (("stages", summary.get("stages", {})),
                         ("endpoints", summary.get("endpoints", {}))):
        if len(group) <= 1:
            continue
        lines.append(f"{title}:")
        for name, b in group.items():
            lat = b["latency"]
            lines.append(
                f"  {name:<10} {b['requests']['total']:>7,} req  TTFT p50 "
                f"{_n(lat['ttft_ms']['p50'])} ms  E2E p50 {_n(lat['e2e_ms']['p50'])} ms  "
                + (f"{_n(b['throughput']['per_gpu_total_tok_s'], ',.0f')} tok/s/GPU  "
                   if title == "stages" else
                   f"{_n(b['throughput']['total_tok_s'], ',.0f')} tok/s  ") +
                f"hit {_pct(b['hit_rate']['usage']['value'])}  "
                f"goodput {_pct(b['goodput']['requests'])}")
    return "\n".join(lines)


def _above_potential(h: dict[str, Any]) -> str:
    """A note when the server hit more than the trace could reuse: its cache held this
    run's blocks from before it (an earlier run with the same seed, the warmup) or blocks
    the trace does not share (a chat template's tokens across sessions)."""
    usage, potential = h["usage"]["value"], h["potential"]["value"]
    if not isinstance(usage, int | float) or not isinstance(potential, int | float) \
            or usage <= potential + 0.005:
        return ""
    return ("; usage above potential: the server's cache held blocks from before this run "
            "(an earlier run with the same seed, warmup) or shared beyond the trace "
            "(docs/metrics.md)")


def _missed_line(g: dict[str, Any]) -> str:
    """Which SLOs the judged agents that are not good missed, most common first."""
    by = g.get("agents_missed_by") or {}
    if not by:
        return ""
    return "; agents missed " + ", ".join(f"{k} x{v:,}" for k, v in by.items())


def _load_line(ld: dict[str, Any] | None) -> list[str]:
    """The load delivered: lanes configured and active, requests in flight."""
    if not ld or ld.get("in_flight_mean") is None:
        return []
    lanes = (f"{ld['lanes']:,} lanes, {ld['lanes_active']:,} active"
             if ld.get("lanes") else f"{ld['lanes_active']:,} lanes active")
    share = ld.get("delivered_share")
    return [f"load          {lanes}; in flight mean {ld['in_flight_mean']:,.2f}, p50 "
            f"{_n(ld['in_flight_p50'], ',.0f')}"
            + (f" ({share:.0%} of the lanes)" if share is not None else "")]


def _where_lines(tb: dict[str, Any] | None) -> list[str]:
    """Where a simulated request's time went, mean per successful request (the parts
    that took any)."""
    if not tb:
        return []
    parts = [f"{k.replace('_', ' ')} {_n(v, ',.0f')} ms ({_pct(tb['share'][k])})"
             for k, v in tb["mean_ms"].items() if v]
    return ["time went     " + ", ".join(parts) + " (mean per request, simulator)"]


def _warmth_lines(rows: list[dict[str, Any]]) -> list[str]:
    """TTFT of cold against warm requests (what a cache hit buys on this run)."""
    known = [r for r in rows if r["warmth"] != WARMTH_NAMES[-1]]
    if len(known) < 2:
        return []
    parts = [f"{r['warmth']} p50 {_n(r.get('ttft_ms_p50'))} ms (n={r['requests']:,})"
             for r in known]
    ended = sum(r["requests"] for r in rows if r["warmth"] == WARMTH_NAMES[-1])
    return ["TTFT by cache  " + ", ".join(parts)
            + (f"; {ended:,} ended without usage" if ended else "")]


def _slowdown(d: dict[str, Any] | None) -> str:
    """``, Nx the trace's LLM time (p50; p90)``, when the trace recorded it."""
    if not d or d.get("p50") is None:
        return ""
    return (f", {d['p50']:,.2f}x the trace's LLM time (p50; p90 "
            f"{_n(d.get('p90'), ',.2f')}x)")
