"""Per session tree (one agent with its subagents): makespan, LLM wait, completion, and
goodput under the scenario's SLOs (CONTRACTS §5)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from agentbench import records as R
from agentbench.metrics.derive import Derived

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


def build_trees(d: Derived, sessions: pd.DataFrame, good: npt.NDArray[np.bool_],
                slos: dict[str, float]) -> pd.DataFrame:
    """One row per measured session tree: stage, endpoint, requests, failed, good,
    makespan_s, llm_wait_s, completed, met_slos, tokens. Makespan and LLM wait come from
    the root's sessions row (replay knows the critical path); without one, makespan is
    last end − first send over the tree's requests and LLM wait is unknown."""
    m = d.measured
    df = d.df
    sent = df["sent_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    end = df["end_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    cached = np.nan_to_num(d.cached_tokens)
    prompt_known = np.where(np.isnan(d.cached_tokens), 0.0, np.nan_to_num(d.prompt_tokens))
    r = pd.DataFrame({
        "stage": df["stage"].to_numpy()[m], "tree_id": df["tree_id"].to_numpy()[m],
        "endpoint": df["endpoint"].to_numpy()[m],
        "requests": 1, "failed": (~d.ok[m]).astype(np.int64), "good": good[m].astype(np.int64),
        "sent": sent[m], "end": end[m], "ttft_ms": d.ttft_ms[m],
        "input_tokens": np.where(d.ok, d.input_tokens, 0.0)[m],
        "output_tokens": np.where(d.ok, np.nan_to_num(d.output_tokens), 0.0)[m],
        "cached_tokens": cached[m], "prompt_tokens_with_cache": prompt_known[m],
        "potential_tokens": d.potential[m], "expected_input_tokens": d.expected_input[m],
    })
    r.loc[r["failed"] == 1, "ttft_ms"] = np.nan
    if r.empty:
        return _empty_trees()
    g = r.groupby(["stage", "tree_id"], sort=False)
    trees = g.agg(
        endpoint=("endpoint", "first"), requests=("requests", "sum"), failed=("failed", "sum"),
        good=("good", "sum"), first_sent=("sent", "min"), last_end=("end", "max"),
        ttft_p50_ms=("ttft_ms", "median"), input_tokens=("input_tokens", "sum"),
        output_tokens=("output_tokens", "sum"), cached_tokens=("cached_tokens", "sum"),
        prompt_tokens_with_cache=("prompt_tokens_with_cache", "sum"),
        potential_tokens=("potential_tokens", "sum"),
        expected_input_tokens=("expected_input_tokens", "sum"),
    ).reset_index()
    trees["makespan_s"] = (trees["last_end"] - trees["first_sent"]) / NS_PER_S
    trees["llm_wait_s"] = np.nan
    trees["completed"] = trees["failed"] == 0
    roots = sessions[(sessions["relation"] == "root") & (sessions["phase"] == R.MEASURE)] \
        if not sessions.empty else sessions
    if not roots.empty:
        s = roots[["stage", "tree_id", "makespan_ns", "llm_wait_ns", "status", "endpoint",
                   "lane"]].rename(columns={"endpoint": "root_endpoint"})
        trees = trees.merge(s, on=["stage", "tree_id"], how="left")
        mk = trees["makespan_ns"].to_numpy(dtype=np.float64, na_value=np.nan) / NS_PER_S
        trees["makespan_s"] = np.where(np.isnan(mk), trees["makespan_s"], mk)
        trees["llm_wait_s"] = trees["llm_wait_ns"].to_numpy(dtype=np.float64,
                                                            na_value=np.nan) / NS_PER_S
        has_root = trees["status"].notna().to_numpy()
        trees["completed"] = np.where(has_root, (trees["status"] == R.OK).to_numpy(),
                                      trees["completed"].to_numpy()) & (trees["failed"] == 0)
        trees["endpoint"] = trees["root_endpoint"].fillna(trees["endpoint"])
        trees = trees.drop(columns=["makespan_ns", "llm_wait_ns", "root_endpoint"])
    met = trees["completed"] & (trees["good"] == trees["requests"])
    if "agent_makespan_s" in slos:
        met &= trees["makespan_s"] <= slos["agent_makespan_s"]
    trees["met_slos"] = met
    return trees.drop(columns=["first_sent", "last_end"])


def _empty_trees() -> pd.DataFrame:
    cols: dict[str, Any] = {c: pd.Series(dtype=np.float64) for c in (
        "requests", "failed", "good", "ttft_p50_ms", "input_tokens", "output_tokens",
        "cached_tokens", "prompt_tokens_with_cache", "potential_tokens",
        "expected_input_tokens", "makespan_s", "llm_wait_s")}
    return pd.DataFrame({"stage": pd.Series(dtype=str), "tree_id": pd.Series(dtype=str),
                         "endpoint": pd.Series(dtype=str), **cols,
                         "completed": pd.Series(dtype=bool), "met_slos": pd.Series(dtype=bool)})
