"""Distribution helpers shared by every metric: percentiles of one array and of many
groups at once (one sort, no Python loop over groups), with linear interpolation
(numpy's default), so a group's p50 equals ``np.percentile(values, 50)``."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

QUANTILES = (0.50, 0.90, 0.95, 0.99)
QNAMES = ("p50", "p90", "p95", "p99")

FloatArray = npt.NDArray[np.float64]


def dist(values: npt.ArrayLike, *, scratch: bool = False) -> dict[str, Any]:
    """count, mean, p50, p90, p95, p99 of the finite values (None when there are none).
    ``scratch``: the caller's array is a temporary that may be reordered (saves a copy)."""
    arr = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any() or (arr is values and not scratch):
        arr = arr[~bad]  # a copy we may reorder
    out: dict[str, Any] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update({"mean": None, **dict.fromkeys(QNAMES)})
        return out
    out["mean"] = float(arr.mean())
    qs = np.percentile(arr, [q * 100 for q in QUANTILES], overwrite_input=True)
    out.update({k: float(v) for k, v in zip(QNAMES, qs, strict=True)})
    return out


def group_quantiles(codes: npt.NDArray[np.int64], values: FloatArray, n_groups: int,
                    quantiles: tuple[float, ...] = QUANTILES) -> tuple[npt.NDArray[np.int64],
                                                                        FloatArray, FloatArray]:
    """Per group (codes in [0, n_groups)): count of non-NaN values, their mean, and the
    requested quantiles (shape n_groups x len(quantiles); NaN for an empty group)."""
    ok = ~np.isnan(values)
    c = codes[ok]
    v = values[ok]
    counts = np.bincount(c, minlength=n_groups).astype(np.int64)
    sums = np.bincount(c, weights=v, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    # sort by (group, value): order the values once, then a stable sort by group (a radix
    # sort when codes fit 16 bits; else one int64 argsort of group × n + rank(value))
    by_value = np.argsort(v)
    if n_groups < 2**15:
        sv = v[by_value[np.argsort(c[by_value].astype(np.int16), kind="stable")]]
    else:
        rank = np.empty(v.size, dtype=np.int64)
        rank[by_value] = np.arange(v.size, dtype=np.int64)
        sv = v[np.argsort(c.astype(np.int64) * max(v.size, 1) + rank)]
    starts = np.zeros(n_groups, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    out = np.full((n_groups, len(quantiles)), np.nan)
    has = counts > 0
    for j, q in enumerate(quantiles):
        pos = starts[has] + q * (counts[has] - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, starts[has] + counts[has] - 1)
        frac = pos - lo
        out[has, j] = sv[lo] + (sv[hi] - sv[lo]) * frac
    return counts, means, out


def ratio(num: float, den: float) -> float | None:
    """num / den, or None when the denominator is zero (a rate over nothing is unknown)."""
    return float(num) / float(den) if den else None


def none_if_nan(x: Any) -> Any:
    """JSON-friendly scalar: NaN and numpy scalars become None / Python numbers."""
    if x is None:
        return None
    if isinstance(x, np.integer):
        return int(x)
    xf = float(x)
    return None if np.isnan(xf) else xf
