"""Measured against predicted, the table of ``agentbench sim check``: the figures of two
run summaries side by side with each one's error, and the same errors request by request
(pure functions over summaries and request tables; :mod:`agentbench.experiment.simcheck`
runs the prediction and prints the table)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agentbench.metrics.catalog import METRICS

#: the table's rows: catalog metric names, then the requests that succeeded
ROWS = ("ttft_p50", "ttft_p90", "itl_p50", "e2e_p50", "tpot_p50", "throughput",
        "output_throughput", "hit_rate")
OK_ROW = "requests_ok"


@dataclass
class CheckRow:
    """One figure: measured, predicted and the error (``predicted / measured - 1``; for a
    share such as the hit rate, ``predicted - measured`` in points, ``error_unit`` "pt").
    None where a side lacks the figure (or the measured value is 0)."""

    metric: str
    label: str
    unit: str
    measured: float | None
    predicted: float | None
    error: float | None
    error_unit: str  # "%" (relative, x100 when shown) or "pt" (percentage points)

def _num(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def figures(summary: dict[str, Any]) -> dict[str, float | None]:
    """The table's figures in one summary (its ``overall`` block): the catalog's, read as
    ``report.compare.comparison_values`` reads them, and ``requests.ok``."""
    out: dict[str, float | None] = {n: _num(METRICS[n].value(summary.get("overall") or {}))
                                    for n in ROWS}
    ok = ((summary.get("overall") or {}).get("requests") or {}).get("ok")
    out[OK_ROW] = _num(ok)
    return out


def compare_figures(measured: dict[str, Any], predicted: dict[str, Any],
                    token_ratio: float = 1.0) -> list[CheckRow]:
    """The rows for two summaries (``measured``: the real run's; ``predicted``: the
    simulated run's). ``token_ratio``: the engine's prompt tokens per token of the
    simulator's count; the measured throughput's input part is divided by it, so both
    sides count tokens alike."""
    from agentbench.report.compare import comparison_values

    vals = comparison_values([measured, predicted], metrics=list(ROWS))
    rows = []
    for name in ROWS:
        m = METRICS[name]
        meas, pred = (_num(vals.loc[name].iloc[0]), _num(vals.loc[name].iloc[1])) \
            if name in vals.index else (None, None)
        if name == "throughput" and token_ratio != 1.0 and meas is not None:
            tp = (measured.get("overall") or {}).get("throughput") or {}
            inp, out = _num(tp.get("input_tok_s")), _num(tp.get("output_tok_s"))
            meas = inp / token_ratio + out if inp is not None and out is not None else meas
        rows.append(_row(name, m.label, "%" if m.share else m.unit, meas, pred, m.share))
    ok_m, ok_p = figures(measured)[OK_ROW], figures(predicted)[OK_ROW]
    rows.append(_row(OK_ROW, "requests ok", "", ok_m, ok_p, False))
    return rows


def _row(name: str, label: str, unit: str, meas: float | None, pred: float | None,
         share: bool) -> CheckRow:
    if meas is None or pred is None:
        err = None
    elif share:
        err = 100.0 * (pred - meas)
    else:
        err = pred / meas - 1.0 if meas != 0 else None
    return CheckRow(name, label, unit, meas, pred, err, "pt" if share else "%")

def token_ratio(requests: Any) -> float:
    """The engine's prompt tokens per token of the trace's count (median over successful
    requests); 1.0 when within 1% or unknown."""
    import numpy as np

    ok = requests[(requests["status"] == "ok") & requests["prompt_tokens"].notna()
                  & (requests["expected_input_tokens"] > 0)]
    if not len(ok):
        return 1.0
    r = float(np.median(ok["prompt_tokens"].to_numpy(float)
                        / ok["expected_input_tokens"].to_numpy(float)))
    return r if abs(r - 1.0) >= 0.01 and np.isfinite(r) and r > 0 else 1.0


def request_errors(measured: Any, predicted: Any) -> dict[str, float]:
    """Errors request by request: both runs' successful requests matched on session, copy
    and turn (see ``SimCheck.per_request``)."""
    import numpy as np

    key = ["session_id", "copy", "turn"]
    cols = [*key, "ttft_ms", "e2e_ms", "prompt_tokens", "cached_tokens"]

    def ok(df: Any) -> Any:
        d = df[df["status"] == "ok"][cols].copy()
        d["session_id"] = d["session_id"].astype(str)
        return d.drop_duplicates(key)

    both = ok(measured).merge(ok(predicted), on=key, suffixes=("_m", "_p"))
    out: dict[str, float] = {"matched": float(len(both))}

    def failed(df: Any) -> set[tuple[str, int, int]]:  # refused, or failed otherwise
        d = df[df["status"] == "error"]
        return set(zip(d["session_id"].astype(str), d["copy"], d["turn"], strict=True))

    fm, fp = failed(measured), failed(predicted)
    if fm or fp:
        out.update(failed_measured=float(len(fm)), failed_predicted=float(len(fp)),
                   failed_both=float(len(fm & fp)))
    if not len(both):
        return out
    for name in ("ttft_ms", "e2e_ms"):
        m, p = both[f"{name}_m"].to_numpy(float), both[f"{name}_p"].to_numpy(float)
        good = np.isfinite(m) & np.isfinite(p) & (m > 0)
        if good.any():
            e = np.abs(p[good] / m[good] - 1)
            out[f"{name[:-3]}_median"] = float(np.median(e))
            out[f"{name[:-3]}_p90"] = float(np.quantile(e, 0.9))
    share = [both[f"cached_tokens_{s}"].to_numpy(float)
             / np.maximum(both[f"prompt_tokens_{s}"].to_numpy(float), 1) for s in "mp"]
    d = np.abs(share[1] - share[0])
    d = d[np.isfinite(d)]
    if len(d):
        out["cached_share_median_pt"] = float(100 * np.median(d))
        out["cached_share_p90_pt"] = float(100 * np.quantile(d, 0.9))
    return out
