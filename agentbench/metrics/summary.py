"""``summarize(run_dir)``: every metric of docs/metrics.md for one results folder, per run,
per sweep stage, per endpoint, per session tree, per turn index and per context-length
bucket, written to ``summary.json``, in the run's time base (``time_base``: simulated time
when every endpoint is the simulator at one speedup, else wall-clock). Warmup requests are
excluded from every measured figure (and counted); failed requests stay in every
denominator that counts requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from agentbench.errors import InputError
from agentbench.metrics import cache, load, saturation
from agentbench.metrics.agents import build_trees, lost_requests, missed_by, request_meets_slos
from agentbench.metrics.cost import agent_fractions, api_cached_input_tokens, cost_block
from agentbench.metrics.derive import Derived, derive
from agentbench.metrics.format import NO_SCENARIO_GPUS
from agentbench.metrics.groups import by_context, by_turn, by_warmth
from agentbench.metrics.stats import dist, none_if_nan, ratio
from agentbench.metrics.summaryfile import write_summary
from agentbench.metrics.validity import (
    agentx_headline,
    gpu_mismatch,
    modeled_gpus,
    validity,
)
from agentbench.results import schema as R
from agentbench.results.reader import RunRecords, Settings, read_records

#: run.json statuses of a run whose process ended without writing its last rows
DIED = ("killed", "crashed")

SCHEMA_VERSION = 4  # 2: time_base; agents completed | failed | cut; 3: honest cost;
#                    4: a killed run's trees without a root row are cut
Window = tuple[int, int]
Mask = npt.NDArray[np.bool_]


def stage_windows(d: Derived) -> dict[str, Window]:
    """Measured window of each stage: first measured send → last measured end, ns (a
    request never sent counts at its scheduled time)."""
    sched, sent, end = d.scheduled_ns, d.sent_ns, d.end_ns
    start = np.where(np.isnan(sent), sched, sent)
    stop = np.fmax(np.where(np.isnan(end), start, end), start)
    m = d.measured
    g = pd.DataFrame({"stage": np.asarray(d.stages, dtype=object)[d.stage_code[m]],
                      "a": start[m], "b": stop[m]})
    w = g.groupby("stage", sort=False).agg(a=("a", "min"), b=("b", "max")).sort_values("a")
    return {str(s): (int(a), int(b)) for s, a, b in zip(w.index, w["a"], w["b"], strict=True)}


def _counts(d: Derived, m: Mask) -> dict[str, Any]:
    """Measured requests by outcome. A request cancelled by the run's own bound (the
    deadline, Ctrl-C) is neither a success nor a failure: it is counted (``cancelled``) and
    left out of the error rate, its denominator and the error table (docs/metrics.md)."""
    cancelled = m & (d.df["status"].to_numpy(dtype=object) == R.CANCELLED)
    failed = m & ~d.ok & ~cancelled
    idx = np.flatnonzero(failed)
    fdf = d.df.iloc[idx]
    status = fdf["status"].to_numpy(dtype=object)
    etype = fdf["error_type"].to_numpy(dtype=object)
    codes = fdf["http_status"].to_numpy(dtype=np.float64, na_value=np.nan)
    errs = pd.DataFrame({"error_type": pd.Series(etype, dtype=object).fillna("unknown"),
                         "http_status": codes})
    overflow = int((etype == R.CONTEXT_OVERFLOW).sum())
    vc = errs.value_counts(dropna=False)
    table = [{"error_type": str(k[0]), "http_status": none_if_nan(k[1]), "count": int(v)}
             for k, v in zip(vc.index, vc.to_numpy(), strict=True)]
    return {"total": int(m.sum()), "ok": int((m & d.ok).sum()),
            "failed": int((status == R.ERROR).sum()),
            "cancelled": int(cancelled.sum()),
            "error_rate": ratio(float(failed.sum()), float((m & ~cancelled).sum())),
            "errors": table,
            "context_overflow": overflow,
            "context_overflow_rate": ratio(float(overflow), float(m.sum())),
            "usage_invalid": int((m & d.usage_invalid).sum()) if d.usage_invalid.size else 0}


class ItlGroups:
    """ITL values of the successful measured requests; a block selects its requests' values
    (they are stored in request order, ``itl_count`` per request)."""

    def __init__(self, d: Derived) -> None:
        self.d = d
        self.base = d.measured & d.ok

    def select(self, stage: int | None = None, endpoint: int | None = None
               ) -> npt.NDArray[np.float64]:
        rows = self.base
        if stage is not None:
            rows = rows & (self.d.stage_code == stage)
        if endpoint is not None:
            rows = rows & (self.d.ep_code == endpoint)
        if not self.d.itl_ms.size:
            return np.zeros(0)
        return self.d.itl_ms[np.repeat(rows, self.d.itl_count)]


def block(d: Derived, m: Mask, windows: list[Window], trees: pd.DataFrame,
          good: Mask, settings: Settings, series: pd.DataFrame, itl: npt.NDArray[np.float64],
          endpoint: str | None = None, gpus: float | None = None) -> dict[str, Any]:
    """Every metric of docs/metrics.md over the measured requests selected by ``m``;
    ``windows`` are the measured windows it spans (throughput and cost divide by their
    total length)."""
    okm = m & d.ok
    window_wall_s = sum(b - a for a, b in windows) / 1e9
    window_s = window_wall_s * d.time_factor  # in the run's time base
    known = okm & ~np.isnan(d.cached_tokens)
    inp = float(d.input_tokens[okm].sum())
    out = float(np.nansum(d.output_tokens[okm]))
    cached = float(d.cached_tokens[known].sum())
    uncached_known = float((d.input_tokens[known] - d.cached_tokens[known]).sum())
    per_gpu = (lambda x: ratio(x, gpus)) if gpus else (lambda x: None)
    thr = {
        "total_tok_s": ratio(inp + out, window_s), "input_tok_s": ratio(inp, window_s),
        "input_cached_tok_s": ratio(cached, window_s),
        "input_uncached_tok_s": ratio(uncached_known, window_s),
        "input_cache_unknown_tok_s": ratio(inp - cached - uncached_known, window_s),
        "output_tok_s": ratio(out, window_s),
        "requests_per_s": ratio(float(okm.sum()), window_s),
    }
    thr.update({"per_gpu_total_tok_s": per_gpu(thr["total_tok_s"] or 0.0),
                "per_gpu_input_tok_s": per_gpu(thr["input_tok_s"] or 0.0),
                "per_gpu_output_tok_s": per_gpu(thr["output_tok_s"] or 0.0)})
    usage = cache.usage_hit_rate(d.cached_tokens[m], d.prompt_tokens[m])
    potential = cache.potential_hit_rate(d.potential[m], d.expected_input[m])
    prom = cache.prometheus_hit_rate(series, windows, endpoint) if windows else \
        {"value": None}
    agents = _agents(trees)
    result: dict[str, Any] = {
        "requests": _counts(d, m),
        "window_s": window_s,
        "window_wall_s": window_wall_s,
        "latency": {"ttft_ms": dist(d.ttft_ms[okm]), "tpot_ms": dist(d.tpot_ms[okm]),
                    "itl_ms": dist(itl, scratch=True), "e2e_ms": dist(d.e2e_ms[okm]),
                    "schedule_lag_ms": dist(d.lag_ms[m])},
        "interactivity_tok_s": dist(d.interactivity[okm]),
        "output_tokens_from_stream": int((okm & d.output_from_stream).sum()),
        "tokens": {"input": inp, "input_cached": cached, "input_uncached": uncached_known,
                   "output": out},
        "throughput": thr,
        "hit_rate": {"usage": usage, "prometheus": prom, "potential": potential,
                     "achieved_over_potential": cache.achieved_over_potential(
                         d.cached_tokens[m], d.prompt_tokens[m], d.potential[m],
                         d.expected_input[m])},
        "agents": agents,
        "goodput": _goodput(d, m, good, trees, agents, window_s, settings),
        "cost": cost_block(
            gpu_hour_usd=settings.gpu_hour_usd, gpus=gpus, window_s=window_s,
            agent_fractions=trees["agent_fraction"].to_numpy(dtype=np.float64),
            input_cached=cached, input_uncached=uncached_known,
            input_cache_unknown=inp - cached - uncached_known, output_tokens=out,
            # the API's own cache (the trace's potential by default), never the server's
            api_cached_input=api_cached_input_tokens(settings.prices, d.input_tokens[okm],
                                                     d.potential[okm], d.expected_input[okm]),
            prices=settings.prices),
    }
    where = time_breakdown(d.df, okm)
    if where is not None:
        result["time_breakdown"] = where
    return result


def _agents(trees: pd.DataFrame) -> dict[str, Any]:
    """The summary's ``agents`` block: trees by outcome, and the makespan, LLM wait and
    slowdown of completed ones (a cut tree's are not an agent's)."""
    n_trees = len(trees)
    outcome = trees["outcome"].to_numpy(dtype=object) if n_trees else np.zeros(0, object)
    completed = int((outcome == "completed").sum())
    failed_trees = int((outcome == "failed").sum())
    done = trees[(outcome == "completed")] if n_trees else trees
    judged = completed + failed_trees  # trees cut by the run's bound are not judged
    return {
        "trees": n_trees, "completed": completed, "failed": failed_trees,
        "cut": n_trees - judged,  # stopped by the run's own bound (not the server's fault)
        # makespan and LLM wait of completed trees: a cut tree's are not an agent's
        "makespan_s": dist(done["makespan_s"].to_numpy(dtype=np.float64)),
        "llm_wait_s": dist(done["llm_wait_s"].to_numpy(dtype=np.float64)),
        # LLM wait over the trace's recorded LLM time of the same requests
        "slowdown": dist(done["slowdown"].to_numpy(dtype=np.float64)),
        "llm_wait_share": ratio(float(np.nansum(done["llm_wait_s"])),
                                float(done["makespan_s"][done["llm_wait_s"].notna()]
                                      .sum())) if len(done) else None,
    }


def _goodput(d: Derived, m: Mask, good: Mask, trees: pd.DataFrame, agents: dict[str, Any],
             window_s: float, settings: Settings) -> dict[str, Any]:
    """The summary's ``goodput`` block: good requests over those that ended, good agents
    over the judged (completed or failed) trees, and why the others missed."""
    judged = agents["completed"] + agents["failed"]
    return {
        "slos": settings.slos,
        # over the requests that ended (cancelled ones were stopped by the run)
        "requests": ratio(float((m & good).sum()),
                          float((m & (d.df["status"].to_numpy(dtype=object)
                                      != R.CANCELLED)).sum())),
        "good_requests": int((m & good).sum()),
        "good_requests_per_s": ratio(float((m & good).sum()), window_s),
        # over completed + failed trees; those cut by the run's bound are left out
        "agents": ratio(float(trees["met_slos"].sum()), judged) if judged else None,
        "good_agents": int(trees["met_slos"].sum()) if agents["trees"] else 0,
        "agents_judged": judged,
        # judged agents that missed, per reason (the request SLO broke, failed, slow)
        "agents_missed_by": missed_by(trees),
    }


def time_breakdown(df: pd.DataFrame, okm: Mask) -> dict[str, Any] | None:
    """Where the selected successful requests' time went (simulated endpoints: the
    ``sim_*_ns`` columns, docs/metrics.md "Where time goes"): the mean of each part in ms
    and its share of their sum; None when no selected row has the parts."""
    if R.BREAKDOWN[0] not in df.columns:
        return None
    parts = df[list(R.BREAKDOWN)].to_numpy(dtype=np.float64)[okm]
    parts = parts[~np.isnan(parts).any(axis=1)]
    if not len(parts):
        return None
    means = parts.mean(axis=0) / 1e6
    total = float(means.sum())
    names = [c.removeprefix("sim_").removesuffix("_ns") for c in R.BREAKDOWN]
    return {"requests": len(parts),
            "mean_ms": {n: float(v) for n, v in zip(names, means, strict=True)},
            "share": {n: (float(v) / total if total > 0 else None)
                      for n, v in zip(names, means, strict=True)}}


def _run_info(rr: RunRecords, windows: dict[str, Window]) -> dict[str, Any]:
    run = rr.run
    sc: dict[str, Any] = run["scenario"] if isinstance(run.get("scenario"), dict) else {}
    endpoints = [str(e) for e in pd.unique(rr.requests["endpoint"])]
    keys = ("run_id", "agentbench_version", "git_commit", "host", "start_wall", "end_wall",
            "status", "seed", "trace")
    info: dict[str, Any] = {k: run.get(k) for k in keys if k in run}
    info.setdefault("run_id", rr.run_dir.name)
    info.update({"name": sc.get("name"), "description": sc.get("description"),
                 "stages": list(windows), "endpoints": endpoints,
                 "gpus": rr.settings.gpus, "gpus_modeled": modeled_gpus(run),
                 "gpus_source": _gpus_source(run),
                 "gpu_hour_usd": rr.settings.gpu_hour_usd,
                 "prices": rr.settings.prices, "slos": rr.settings.slos})
    return info


def _gpus_source(run: dict[str, Any]) -> str:
    """Where the run's GPU count (per-GPU figures, self-hosted cost) comes from."""
    if not isinstance(run.get("scenario"), dict):
        # a run.json without its scenario (damaged, or written by hand): nothing states it
        return NO_SCENARIO_GPUS
    modeled = modeled_gpus(run)
    if modeled is None:
        return "hardware.gpus as the scenario states (not checked: a real endpoint, or a " \
            "preset that does not say its GPUs)"
    if modeled == 0:
        return "hardware.gpus as the scenario states (the simulated endpoints model no GPU)"
    why = gpu_mismatch(run)
    return why if why is not None else "hardware.gpus, equal to what the simulated " \
        "endpoints model"


TREE_COLUMNS = ("stage", "tree_id", "endpoint", "requests", "failed", "good", "good_share",
                "completed", "outcome", "met_slos", "missed", "makespan_s", "llm_wait_s",
                "slowdown", "ttft_p50_ms", "input_tokens", "output_tokens", "cached_tokens",
                "potential_tokens", "agent_fraction")


def _trees_columns(trees: pd.DataFrame) -> dict[str, list[Any]]:
    """Per-tree table, column-wise (compact JSON for tens of thousands of trees)."""
    out: dict[str, list[Any]] = {}
    for c in TREE_COLUMNS:
        col = trees[c] if c in trees.columns else pd.Series([None] * len(trees))
        if col.dtype.kind == "f":
            out[c] = [None if v != v else v for v in col.to_numpy(dtype=np.float64).tolist()]
        else:
            out[c] = col.astype(object).where(col.notna(), None).tolist()
    return out


def summarize_records(rr: RunRecords) -> dict[str, Any]:
    """The summary of already-read records (see ``summarize``)."""
    try:
        d = derive(rr.requests, rr.events, rr.time_base.factor)
    except InputError as e:
        raise e.located(source=str(rr.run_dir / R.REQUESTS_FILE)) from None
    s = rr.settings
    windows = stage_windows(d)
    good = request_meets_slos(d, s.slos)
    trees = build_trees(d, rr.sessions, good, s.slos,
                        roots_expected=rr.run.get("status") in DIED,
                        lost=lost_requests(d, rr.run))
    trees["agent_fraction"] = agent_fractions(trees, rr.sessions)  # for $/agent
    series = cache.counter_series(rr.server_metrics)
    all_w = list(windows.values())
    itl = ItlGroups(d)
    stage_col = d.stage_code
    ep_col = d.ep_code
    m = d.measured
    summary: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run": _run_info(rr, windows),
        "time_base": rr.time_base.as_dict(),
        "warmup_requests_excluded": int((~m).sum()),
        "overall": block(d, m, all_w, trees, good, s, series, itl.select(), gpus=s.gpus),
        "stages": {st: block(d, m & (stage_col == d.stages.index(st)), [w],
                             trees[(trees["stage"] == st).to_numpy(dtype=bool)], good, s,
                             series, itl.select(stage=d.stages.index(st)), gpus=s.gpus)
                   for st, w in windows.items()},
        "endpoints": {ep: block(d, m & (ep_col == i), all_w,
                                trees[(trees["endpoint"] == ep).to_numpy(dtype=bool)], good, s,
                                series, itl.select(endpoint=i), endpoint=ep)
                      for i, ep in enumerate(d.endpoints) if (m & (ep_col == i)).any()},
        "by_turn": by_turn(d),
        "by_context": by_context(d),
        "by_warmth": by_warmth(d),
        "trees": _trees_columns(trees),
    }
    lanes = _stage_lanes(rr.run)
    for st, w in windows.items():
        summary["stages"][st]["load"] = load.delivered(
            d, m & (stage_col == d.stages.index(st)), [w], lanes.get(st))
    summary["overall"]["load"] = load.delivered(
        d, m, all_w, next(iter(lanes.values())) if len(windows) == 1 and lanes else None)
    # did the client deliver the offered load? (a warning where the time base's are, so
    # the terminal summary and the report show it with the figures it qualifies)
    summary["client_saturated"] = saturation.verdict(d, rr.time_base.kind,
                                                     _stage_lanes(rr.run))
    if (warn := saturation.warning(summary["client_saturated"])) is not None:
        summary["time_base"]["warnings"].append(warn)
    if (warn := saturation.stall_warning(rr.run, rr.time_base.kind)) is not None:
        summary["time_base"]["warnings"].append(warn)
    nodes = saturation.by_node(d, rr.run, rr.time_base.kind)
    if nodes is not None:  # lanes on Ray nodes: each node's own verdict
        summary["client_saturated_by_node"] = nodes
        late = [k for k, v in nodes.items() if v and v["saturated"]]
        if late:
            summary["time_base"]["warnings"].append(
                f"client saturated on Ray node{'s' if len(late) > 1 else ''} "
                f"{', '.join(late)} (summary.json client_saturated_by_node)")
    if (warn := _overrun(rr.run)) is not None:
        summary["time_base"]["warnings"].append(warn)
    if R.SESSIONS_FILE in rr.missing:
        summary["time_base"]["warnings"].append(NO_SESSIONS)
    summary["validity"] = validity(rr.run, summary["stages"], d)
    if summary["validity"] is not None:
        summary["agentx"] = agentx_headline(summary["stages"])
    return summary


#: the warning of a run folder without sessions.parquet, which every run writes: the
#: agents' figures fall back to their requests (docs/metrics.md, agent makespan)
NO_SESSIONS = ("sessions.parquet not found (every run writes it): each agent's makespan is "
               "its requests' span, its LLM wait and slowdown are unknown, and an agent "
               "whose last turns were never sent counts as completed")


def _overrun(run: dict[str, Any]) -> str | None:
    """A warning when a stage went on well past ``limits.duration_s`` (on_deadline: finish
    lets the requests in flight end), or None."""
    sc = run.get("scenario")
    lim = (sc.get("limits") if isinstance(sc, dict) else None) or {}
    dur = lim.get("duration_s")
    if not isinstance(dur, int | float) or dur <= 0 or lim.get("on_deadline") == "cancel":
        return None
    spans = [(st["end_ns"] - st.get("profile_start_ns", st["start_ns"])) / 1e9
             for st in run.get("stages") or []
             if isinstance(st, dict) and isinstance(st.get("start_ns"), int)
             and isinstance(st.get("end_ns"), int)
             and isinstance(st.get("profile_start_ns", 0), int)]
    over = max(spans, default=0.0) - dur
    if over <= max(0.2 * dur, 5.0):
        return None
    return (f"a stage ran {over:,.0f} s past limits.duration_s ({dur:g} s): on_deadline: "
            "finish lets the requests in flight end; on_deadline: cancel stops them at the "
            "deadline")


def _stage_lanes(run: dict[str, Any]) -> dict[str, int | None]:
    """Each stage's lanes, from run.json (closed loop; None for open loop)."""
    return {str(st.get("label")): st.get("lanes") for st in run.get("stages") or []
            if isinstance(st, dict)}


def summarize(run_dir: str | Path, *, write: bool = True) -> dict[str, Any]:
    """Compute every metric of docs/metrics.md from ``results/<run>/`` alone and write
    ``summary.json`` there (unless ``write`` is False). Returns the summary dict."""
    rr = read_records(run_dir)
    summary = summarize_records(rr)
    if write:
        write_summary(Path(run_dir) / R.SUMMARY_FILE, summary)
    return summary
