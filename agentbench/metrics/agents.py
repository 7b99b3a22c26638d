"""Per session tree (one agent with its subagents): makespan, LLM wait, completion, and
goodput under the scenario's SLOs (docs/metrics.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from agentbench.metrics.derive import Derived
from agentbench.metrics.stats import group_quantiles
from agentbench.results import schema as R

NS_PER_S = 1e9


def request_meets_slos(d: Derived, slos: dict[str, float]) -> npt.NDArray[np.bool_]:
    """A request is good when it succeeded and met every request SLO: TTFT ≤ ttft_ms,
    TPOT ≤ tpot_ms (a ≤ 1-token reply has no TPOT and passes), E2E ≤ e2e_ms."""
    good = d.ok.copy()
    if "ttft_ms" in slos:
        good &= d.ttft_ms <= slos["ttft_ms"]
    if "tpot_ms" in slos:
        good &= np.isnan(d.tpot_ms) | (d.tpot_ms <= slos["tpot_ms"])
    if "e2e_ms" in slos:
        good &= d.e2e_ms <= slos["e2e_ms"]
    return good


#: the request SLOs, in the order a missed agent names them
REQUEST_SLOS = ("ttft_ms", "tpot_ms", "e2e_ms")


def slo_misses(d: Derived, slos: dict[str, float]) -> dict[str, npt.NDArray[np.bool_]]:
    """Per request SLO set, the successful requests that broke it."""
    out = {}
    if "ttft_ms" in slos:
        out["ttft_ms"] = d.ok & ~(d.ttft_ms <= slos["ttft_ms"])
    if "tpot_ms" in slos:
        out["tpot_ms"] = d.ok & ~(np.isnan(d.tpot_ms) | (d.tpot_ms <= slos["tpot_ms"]))
    if "e2e_ms" in slos:
        out["e2e_ms"] = d.ok & ~(d.e2e_ms <= slos["e2e_ms"])
    return out


def build_trees(d: Derived, sessions: pd.DataFrame, good: npt.NDArray[np.bool_],
                slos: dict[str, float], roots_expected: bool = False,
                lost: npt.NDArray[np.bool_] | None = None) -> pd.DataFrame:
    """One row per measured session tree: stage, endpoint, requests, failed, good,
    makespan_s, llm_wait_s, completed, outcome, met_slos, tokens. Makespan and LLM wait
    come from the root's sessions row (replay knows the critical path); without one,
    makespan is last end − first send over the tree's requests and LLM wait is unknown.
    Both are in the run's time base (x ``d.time_factor``).

    ``outcome``: ``failed`` when a request of the tree failed (or its root says error);
    else ``cut`` when the run's own bound stopped it (a request cancelled at the deadline,
    or the root ``incomplete``/``cancelled``); else ``completed``. A cut tree is not a
    failure of the server: agent goodput counts completed and failed trees only.

    ``roots_expected``: the run died without writing the rows of the trees in progress
    (run.json ``killed``/``crashed``), so a tree without a root row is ``cut``, never
    ``completed``.

    ``lost``: per request row, whether it came from a Ray load worker lost mid-run
    (run.json ``ray.lost``), which never wrote the sessions rows of the trees it had in
    progress: such a tree without a sessions row is ``cut``, never ``completed``."""
    trees = _tree_totals(d, good, slos, lost)
    if trees.empty:
        return _empty_trees()
    f = d.time_factor
    span = (trees["last_end"] - trees["first_sent"]).to_numpy(dtype=np.float64) / NS_PER_S * f
    trees["makespan_s"] = np.where(np.isfinite(span), span, np.nan)  # never sent: unknown
    trees["llm_wait_s"] = np.nan
    trees["slowdown"] = np.nan
    trees["completed"] = (trees["failed"] == 0) & (not roots_expected)
    if lost is not None:
        ended = trees.set_index(["stage", "tree_id"]).index.isin(
            pd.MultiIndex.from_frame(sessions[["stage", "tree_id"]]))
        trees["completed"] &= ~((trees["lost"] > 0).to_numpy() & ~ended)
    trees = trees.drop(columns=["lost"])
    root_status = pd.Series([None] * len(trees), dtype=object)
    roots = sessions[((sessions["relation"] == "root") & (sessions["phase"] == R.MEASURE))
                     .to_numpy(dtype=bool)] if not sessions.empty else sessions
    if not roots.empty:
        trees = _with_roots(trees, roots, f)
        root_status = trees["status"].astype(object)
    failed = (trees["errors"] > 0).to_numpy() | (root_status == R.ERROR).to_numpy()
    trees["outcome"] = np.where(failed, "failed", np.where(trees["completed"].to_numpy(),
                                                           "completed", "cut"))
    share = slos.get("agent_good_share")
    trees["good_share"] = trees["good"] / trees["requests"].where(trees["requests"] > 0)
    enough = (trees["good"] == trees["requests"]) if share is None else \
        (trees["good_share"] >= share - 1e-12)
    met = trees["completed"] & enough
    slow = pd.Series(False, index=trees.index)
    if "agent_makespan_s" in slos:
        slow = ~(trees["makespan_s"] <= slos["agent_makespan_s"])
        met &= ~slow
    trees["met_slos"] = met
    trees["missed"] = _missed(trees, enough, slow)
    return trees.drop(columns=["first_sent", "last_end"])


def lost_requests(d: Derived, run: dict[str, Any]) -> npt.NDArray[np.bool_] | None:
    """Per request row, whether it came from a Ray load worker lost mid-run (run.json
    ``ray.lost``, ``Derived.ray_worker``); None when no worker was lost."""
    ray = run.get("ray") or {}
    workers, lost = ray.get("workers") or [], ray.get("lost") or []
    if not workers or not lost:
        return None
    return np.isin(d.ray_worker(len(workers)), [int(x["worker"]) for x in lost])


def _tree_totals(d: Derived, good: npt.NDArray[np.bool_], slos: dict[str, float],
                 lost: npt.NDArray[np.bool_] | None = None) -> pd.DataFrame:
    """Per tree with a measured request: its endpoint (of its first request), request,
    failure, error, cancellation, good and SLO-miss counts, median TTFT, token totals,
    first send and last end (ns), and the requests of a lost worker (``lost``)."""
    m = d.measured
    n = len(d.tree_keys)
    code = d.tree_code[m]
    sent = d.sent_ns[m]
    end = d.end_ns[m]

    def total(x: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return np.bincount(code, weights=np.asarray(x, dtype=np.float64), minlength=n)

    first_sent = np.full(n, np.inf)
    np.fmin.at(first_sent, code, np.where(np.isnan(sent), np.inf, sent))
    last_end = np.full(n, -np.inf)
    np.fmax.at(last_end, code, np.where(np.isnan(end), -np.inf, end))
    ok = d.ok[m]
    _, _, ttft_q = group_quantiles(code, np.where(ok, d.ttft_ms[m], np.nan), n, (0.5,))
    cached = d.cached_tokens[m]
    known = ~np.isnan(cached)
    first_row = np.full(n, len(code), dtype=np.int64)
    np.minimum.at(first_row, code, np.arange(len(code)))
    present = np.bincount(code, minlength=n) > 0
    ep = np.asarray(d.endpoints, dtype=object)[d.ep_code[m]]
    trees = d.tree_keys.copy()
    first_ep = ep[np.minimum(first_row, len(ep) - 1)] if len(ep) else np.full(n, "", object)
    trees["endpoint"] = pd.Series(first_ep, dtype=object).where(present, None).to_numpy()
    trees["requests"] = np.bincount(code, minlength=n)
    trees["failed"] = np.bincount(code[~ok], minlength=n)
    status = d.df["status"].to_numpy(dtype=object)[m]
    trees["errors"] = np.bincount(code[status == R.ERROR], minlength=n)
    trees["cancelled"] = np.bincount(code[status == R.CANCELLED], minlength=n)
    trees["good"] = np.bincount(code[good[m]], minlength=n)
    trees["lost"] = 0 if lost is None else np.bincount(code[lost[m]], minlength=n)
    for name, miss in slo_misses(d, slos).items():
        trees[f"missed_{name}"] = np.bincount(code[miss[m]], minlength=n)
    trees["ttft_p50_ms"] = ttft_q[:, 0]
    trees["input_tokens"] = total(np.where(ok, d.input_tokens[m], 0.0))
    trees["output_tokens"] = total(np.where(ok, np.nan_to_num(d.output_tokens[m]), 0.0))
    trees["cached_tokens"] = total(np.where(known, cached, 0.0))
    trees["prompt_tokens_with_cache"] = total(np.where(known, np.nan_to_num(d.prompt_tokens[m]),
                                                       0.0))
    trees["potential_tokens"] = total(d.potential[m])
    trees["expected_input_tokens"] = total(d.expected_input[m])
    trees["first_sent"] = first_sent
    trees["last_end"] = last_end
    return trees[present].reset_index(drop=True)


def _with_roots(trees: pd.DataFrame, roots: pd.DataFrame, f: float) -> pd.DataFrame:
    """``trees`` joined with their roots' sessions rows: makespan, LLM wait and slowdown
    from the replay's critical path, completion from the root's ``status``, the root's
    endpoint and lane."""
    s = roots[["stage", "tree_id", "makespan_ns", "llm_wait_ns", "recorded_llm_ns",
               "status", "endpoint", "lane"]].rename(columns={"endpoint": "root_endpoint"})
    trees = trees.merge(s, on=["stage", "tree_id"], how="left")
    mk = trees["makespan_ns"].to_numpy(dtype=np.float64, na_value=np.nan) / NS_PER_S * f
    trees["makespan_s"] = np.where(np.isnan(mk), trees["makespan_s"], mk)
    trees["llm_wait_s"] = trees["llm_wait_ns"].to_numpy(dtype=np.float64,
                                                        na_value=np.nan) / NS_PER_S * f
    # the agent's LLM time against the trace's own for the same requests (>1: slower)
    rec = trees["recorded_llm_ns"].to_numpy(dtype=np.float64, na_value=np.nan) / NS_PER_S
    with np.errstate(divide="ignore", invalid="ignore"):
        trees["slowdown"] = np.where(rec > 0, trees["llm_wait_s"].to_numpy() / rec, np.nan)
    has_root = trees["status"].notna().to_numpy()
    trees["completed"] = np.where(has_root, (trees["status"] == R.OK).to_numpy(),
                                  trees["completed"].to_numpy()) & (trees["failed"] == 0)
    trees["endpoint"] = trees["root_endpoint"].fillna(trees["endpoint"])
    return trees.drop(columns=["makespan_ns", "llm_wait_ns", "recorded_llm_ns",
                               "root_endpoint"])


def _missed(trees: pd.DataFrame, enough: pd.Series, slow: pd.Series) -> list[str | None]:
    """Why each judged tree that is not good missed (comma-joined: ``failed``, the request
    SLOs its requests broke, ``agent_makespan_s``); None for a good or cut tree."""
    names = [n for n in REQUEST_SLOS if f"missed_{n}" in trees.columns]
    counts = [trees[f"missed_{n}"].to_numpy(dtype=np.int64) for n in names]
    met = trees["met_slos"].to_numpy(dtype=bool)
    outcome = trees["outcome"].to_numpy(dtype=object)
    few = ~enough.to_numpy(dtype=bool)
    late = slow.to_numpy(dtype=bool)
    out: list[str | None] = []
    for i in range(len(trees)):
        if met[i] or outcome[i] == "cut":
            out.append(None)
            continue
        why = ["failed"] if outcome[i] == "failed" else []
        if few[i]:
            why += [n for n, c in zip(names, counts, strict=True) if c[i] > 0]
        if late[i]:
            why.append("agent_makespan_s")
        out.append(",".join(why) or None)
    return out


def _empty_trees() -> pd.DataFrame:
    cols: dict[str, Any] = {c: pd.Series(dtype=np.float64) for c in (
        "requests", "failed", "errors", "cancelled", "good", "ttft_p50_ms", "input_tokens",
        "output_tokens", "cached_tokens", "prompt_tokens_with_cache", "potential_tokens",
        "expected_input_tokens", "makespan_s", "llm_wait_s", "slowdown")}
    return pd.DataFrame({"stage": pd.Series(dtype=str), "tree_id": pd.Series(dtype=str),
                         "endpoint": pd.Series(dtype=str), **cols,
                         "completed": pd.Series(dtype=bool), "outcome": pd.Series(dtype=str),
                         "met_slos": pd.Series(dtype=bool),
                         "good_share": pd.Series(dtype=np.float64),
                         "missed": pd.Series(dtype=object)})


def missed_by(trees: pd.DataFrame) -> dict[str, int]:
    """How many judged trees missed their SLOs for each reason (a tree may have several:
    ``failed``, ``ttft_ms``, ``tpot_ms``, ``e2e_ms``, ``agent_makespan_s``)."""
    out: dict[str, int] = {}
    for why in trees["missed"].dropna() if "missed" in trees.columns else ():
        for w in str(why).split(","):
            out[w] = out.get(w, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
