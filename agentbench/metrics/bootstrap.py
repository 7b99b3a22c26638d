"""Bootstrap over session trees: resample a run's trees with replacement (seeded) and
recompute a metric per replicate, so a change between two runs comes with a confidence
interval. Trees, not requests, are the unit: turns of one agent are correlated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.metrics.agents import build_trees, request_meets_slos
from agentbench.metrics.derive import Derived, derive
from agentbench.metrics.records_io import RunRecords
from agentbench.metrics.summary import stage_windows

FloatArray = npt.NDArray[np.float64]
QUANT = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
LATENCY = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}


@dataclass
class TreeData:
    """What a replicate needs: per measured request its tree and values; per tree sums."""

    n_trees: int
    tree: npt.NDArray[np.int64]       # tree index of each measured request
    ok: npt.NDArray[np.bool_]
    values: dict[str, FloatArray]     # per measured request (ttft_ms, tpot_ms, e2e_ms)
    sums: dict[str, FloatArray]       # per tree
    per_tree: dict[str, FloatArray]   # per tree values (makespan_s, llm_wait_s)
    window_s: float
    gpus: float


def tree_data(rr: RunRecords, d: Derived) -> TreeData:
    """Per-tree sums of the quantities the bootstrappable metrics are made of, in the run's
    time base (as its summary: ``d`` is derived again when it was not)."""
    if d.time_factor != rr.time_base.factor:
        d = derive(rr.requests, rr.events, rr.time_base.factor)
    m = d.measured
    _, tree = np.unique(d.tree_code[m], return_inverse=True)
    tree = tree.astype(np.int64)
    n = int(tree.max()) + 1 if tree.size else 0
    ok = d.ok[m]
    good = request_meets_slos(d, rr.settings.slos)[m]
    cached = d.cached_tokens[m]
    prompt = d.prompt_tokens[m]
    known = ~np.isnan(cached) & ~np.isnan(prompt)

    def s(x: npt.ArrayLike) -> npt.NDArray[Any]:
        return np.bincount(tree, weights=np.asarray(x, dtype=np.float64), minlength=n)

    tokens = np.where(ok, d.input_tokens[m] + np.nan_to_num(d.output_tokens[m]), 0.0)
    windows = stage_windows(d)
    trees = build_trees(d, rr.sessions, request_meets_slos(d, rr.settings.slos),
                        rr.settings.slos)  # one row per tree, in tree index order
    return TreeData(
        n_trees=n, tree=tree, ok=ok,
        values={k: getattr(d, v)[m] for k, v in LATENCY.items()},
        sums={"requests": s(np.ones(tree.size)), "failed": s(~ok), "good": s(good),
              "tokens": s(tokens), "output": s(np.where(ok, np.nan_to_num(d.output_tokens[m]),
                                                         0.0)),
              "ok": s(ok), "cached": s(np.where(known, cached, 0.0)),
              "prompt": s(np.where(known, prompt, 0.0))},
        # makespan and LLM wait of completed trees only, as in the summary
        per_tree={k: np.where(trees["outcome"] == "completed",
                              trees[k].to_numpy(dtype=np.float64), np.nan)
                  for k in ("makespan_s", "llm_wait_s")} if len(trees) == n else {},
        window_s=sum(b - a for a, b in windows.values()) / 1e9 * d.time_factor,
        gpus=rr.settings.gpus,
    )


def _weighted_quantile(values: FloatArray, tree: npt.NDArray[np.int64], weights: FloatArray,
                       q: float) -> FloatArray:
    """Per replicate (rows of ``weights``, one weight per tree), the q-quantile of the
    values with each value weighted by its tree's weight (inverse weighted CDF)."""
    keep = ~np.isnan(values)
    v, t = values[keep], tree[keep]
    if v.size == 0:
        return np.full(weights.shape[0], np.nan)
    order = np.argsort(v)
    v, t = v[order], t[order]
    out = np.empty(weights.shape[0])
    for lo in range(0, weights.shape[0], 64):  # bounded memory: 64 replicates at a time
        w = weights[lo:lo + 64][:, t]
        cw = np.cumsum(w, axis=1)
        target = q * cw[:, -1:]
        idx = (cw < target).sum(axis=1)
        out[lo:lo + 64] = v[np.minimum(idx, v.size - 1)]
    return out


def _replicate_fn(name: str) -> Callable[[TreeData, FloatArray], FloatArray] | None:
    """The function computing metric ``name`` for every replicate (weights B × trees)."""
    kind, _, stat = name.partition("_")
    if kind in LATENCY and (stat in QUANT or stat == "mean"):
        def lat(td: TreeData, w: FloatArray) -> FloatArray:
            vals = np.where(td.ok, td.values[kind], np.nan)
            if stat == "mean":
                keep = ~np.isnan(vals)
                tot = np.bincount(td.tree[keep], weights=vals[keep], minlength=td.n_trees)
                cnt = np.bincount(td.tree[keep], minlength=td.n_trees).astype(np.float64)
                return (w @ tot) / np.maximum(w @ cnt, 1e-300)
            return _weighted_quantile(vals, td.tree, w, QUANT[stat])
        return lat

    if name in ("makespan_p50", "llm_wait_p50"):
        key = name.replace("_p50", "_s")

        def per_tree(td: TreeData, w: FloatArray) -> FloatArray:
            vals = td.per_tree.get(key, np.full(td.n_trees, np.nan))
            return _weighted_quantile(vals, np.arange(td.n_trees), w, 0.5)
        return per_tree

    def share(num: str, den: str) -> Callable[[TreeData, FloatArray], FloatArray]:
        return lambda td, w: (w @ td.sums[num]) / np.maximum(w @ td.sums[den], 1e-300)

    def rate(key: str, per_gpu: bool) -> Callable[[TreeData, FloatArray], FloatArray]:
        return lambda td, w: (w @ td.sums[key]) / td.window_s / (td.gpus if per_gpu else 1.0)

    table: dict[str, Callable[[TreeData, FloatArray], FloatArray]] = {
        "hit_rate": share("cached", "prompt"), "goodput": share("good", "requests"),
        "error_rate": share("failed", "requests"),
        "throughput": rate("tokens", False), "throughput_per_gpu": rate("tokens", True),
        "output_throughput": rate("output", False), "requests_per_s": rate("ok", False),
    }
    return table.get(name)


def bootstrappable(name: str) -> bool:
    """Whether ``name`` (a catalog metric) can be resampled over trees."""
    return _replicate_fn(name) is not None


def replicates(td: TreeData, name: str, resamples: int, seed: int) -> FloatArray:
    """``resamples`` bootstrap values of metric ``name``: each replicate draws n_trees trees
    with replacement (multinomial counts as weights), seeded."""
    fn = _replicate_fn(name)
    if fn is None:
        raise KeyError(name)
    if td.n_trees == 0:
        return np.full(resamples, np.nan)
    rng = np.random.default_rng(seed)
    w = rng.multinomial(td.n_trees, np.full(td.n_trees, 1.0 / td.n_trees),
                        size=resamples).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return fn(td, w)
