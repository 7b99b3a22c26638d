"""Bootstrap over session trees: resample a run's trees with replacement (seeded) and
recompute a metric per replicate, so a change between two runs comes with a confidence
interval. Trees, not requests, are the unit: turns of one agent are correlated.

Two runs of one scenario replay the same trees, so :func:`paired_replicates` draws the
tree ids once per replicate and applies the draw to both runs: the difference between
the runs is then resampled, not each run's own spread (much of which is the trees'
difference from each other, the same in both runs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.metrics.agents import build_trees, lost_requests, request_meets_slos
from agentbench.metrics.derive import Derived, derive
from agentbench.metrics.summary import stage_windows
from agentbench.results import schema as R
from agentbench.results.reader import RunRecords

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
    #: per tree: ``stage`` + US + ``tree_id``, the key that pairs trees across two runs
    keys: list[str] = field(default_factory=list)
    #: per tree: busy time (first request sent → last ended) in the window's unit
    busy_s: FloatArray = field(default_factory=lambda: np.zeros(0))


def tree_data(rr: RunRecords, d: Derived) -> TreeData:
    """Per-tree sums of the quantities the bootstrappable metrics are made of, in the run's
    time base (as its summary: ``d`` is derived again when it was not)."""
    if d.time_factor != rr.time_base.factor:
        d = derive(rr.requests, rr.events, rr.time_base.factor)
    m = d.measured
    codes, tree = np.unique(d.tree_code[m], return_inverse=True)
    tree = tree.astype(np.int64)
    n = int(tree.max()) + 1 if tree.size else 0
    keys = [f"{st}\x1f{tid}" for st, tid in zip(d.tree_keys["stage"].to_numpy()[codes],
                                                 d.tree_keys["tree_id"].to_numpy()[codes],
                                                 strict=True)]
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, tree, np.nan_to_num(d.sent_ns[m], nan=np.inf))
    np.maximum.at(last, tree, np.nan_to_num(d.end_ns[m], nan=-np.inf))
    busy = np.where(last > first, last - first, 0.0) / 1e9 * d.time_factor
    ok = d.ok[m]
    # a request the run's own bound cancelled is neither a failure nor in the error rate's
    # or goodput's denominator, as in the summary (docs/metrics.md)
    ended = d.df["status"].to_numpy(dtype=object)[m] != R.CANCELLED
    good = request_meets_slos(d, rr.settings.slos)[m]
    cached = d.cached_tokens[m]
    prompt = d.prompt_tokens[m]
    known = ~np.isnan(cached) & ~np.isnan(prompt)

    def s(x: npt.ArrayLike) -> npt.NDArray[Any]:
        return np.bincount(tree, weights=np.asarray(x, dtype=np.float64), minlength=n)

    tokens = np.where(ok, d.input_tokens[m] + np.nan_to_num(d.output_tokens[m]), 0.0)
    windows = stage_windows(d)
    trees = build_trees(d, rr.sessions, request_meets_slos(d, rr.settings.slos),
                        rr.settings.slos, lost=lost_requests(d, rr.run))  # in tree order
    return TreeData(
        n_trees=n, tree=tree, ok=ok,
        values={k: getattr(d, v)[m] for k, v in LATENCY.items()},
        sums={"requests": s(np.ones(tree.size)), "ended": s(ended),
              "failed": s(~ok & ended), "good": s(good),
              "tokens": s(tokens), "output": s(np.where(ok, np.nan_to_num(d.output_tokens[m]),
                                                         0.0)),
              "ok": s(ok), "cached": s(np.where(known, cached, 0.0)),
              "prompt": s(np.where(known, prompt, 0.0))},
        # makespan and LLM wait of completed trees only, as in the summary
        per_tree={k: np.where(trees["outcome"] == "completed",
                              trees[k].to_numpy(dtype=np.float64), np.nan)
                  for k in ("makespan_s", "llm_wait_s")} if len(trees) == n else {},
        window_s=sum(b - a for a, b in windows.values()) / 1e9 * d.time_factor,
        gpus=rr.settings.gpus, keys=keys, busy_s=busy,
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
        # tokens per busy tree-second x the run's occupancy (Σ busy / window): equal to
        # Σ tokens / window for the run as it was (every weight 1), and it moves with the
        # resampled trees' own durations, so a replicate sees the run-to-run noise of the
        # time the trees took, not only of their (replayed, identical) token counts
        def f(td: TreeData, w: FloatArray) -> FloatArray:
            scale = 1.0 / (td.gpus if per_gpu else 1.0)
            total = float(td.busy_s.sum()) if td.busy_s.size == td.n_trees else 0.0
            if total <= 0:
                return (w @ td.sums[key]) / td.window_s * scale
            return (w @ td.sums[key]) / (w @ td.busy_s) * (total / td.window_s) * scale
        return f

    table: dict[str, Callable[[TreeData, FloatArray], FloatArray]] = {
        "hit_rate": share("cached", "prompt"), "goodput": share("good", "ended"),
        "error_rate": share("failed", "ended"),
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
    w = _weights(np.random.default_rng(seed), td.n_trees, resamples)
    with np.errstate(invalid="ignore", divide="ignore"):
        return fn(td, w)


def _weights(rng: np.random.Generator, n: int, resamples: int) -> FloatArray:
    """Multinomial counts: each row draws n of n items with replacement."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(np.float64)


def paired_replicates(a: TreeData, b: TreeData, name: str, resamples: int,
                      seed: int) -> tuple[FloatArray, FloatArray, int]:
    """Bootstrap values of metric ``name`` in runs ``a`` and ``b`` from ONE draw of tree
    keys per replicate, applied to both runs (trees in only one run get weight 0).

    Returns (values in a, values in b, trees paired). With no tree in common the two runs
    are resampled independently and 0 trees are paired."""
    fn = _replicate_fn(name)
    if fn is None:
        raise KeyError(name)
    pos_b = {k: i for i, k in enumerate(b.keys)}
    ia, ib = [], []
    for i, k in enumerate(a.keys):
        j = pos_b.get(k)
        if j is not None:
            ia.append(i)
            ib.append(j)
    if not ia:
        return replicates(a, name, resamples, seed), replicates(b, name, resamples, seed + 1), 0
    w = _weights(np.random.default_rng(seed), len(ia), resamples)
    wa = np.zeros((resamples, a.n_trees))
    wb = np.zeros((resamples, b.n_trees))
    wa[:, ia] = w
    wb[:, ib] = w
    with np.errstate(invalid="ignore", divide="ignore"):
        return fn(a, wa), fn(b, wb), len(ia)
