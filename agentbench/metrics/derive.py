"""Per-request latencies (docs/metrics.md), vectorised over whole columns. Every function
takes nanosecond columns and returns float64 arrays in the unit its name says, NaN where
the value does not exist (no first token, ≤ 1 output token, request never sent)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from agentbench.results import schema as R
from agentbench.results.schema import USAGE_MAX

FloatArray = npt.NDArray[np.float64]
NS_PER_MS = 1e6


def _f(col: pd.Series) -> FloatArray:
    return col.to_numpy(dtype=np.float64, na_value=np.nan)


def ttft_ms(sent_ns: pd.Series, first_token_ns: pd.Series) -> FloatArray:
    """TTFT = first_token_ns − sent_ns, ms."""
    return (_f(first_token_ns) - _f(sent_ns)) / NS_PER_MS


def e2e_ms(sent_ns: pd.Series, end_ns: pd.Series) -> FloatArray:
    """E2E = end_ns − sent_ns, ms."""
    return (_f(end_ns) - _f(sent_ns)) / NS_PER_MS


def schedule_lag_ms(scheduled_ns: pd.Series, sent_ns: pd.Series) -> FloatArray:
    """Schedule lag = sent_ns − scheduled_ns, ms (the client's own delay)."""
    return (_f(sent_ns) - _f(scheduled_ns)) / NS_PER_MS


def tpot_ms(first_token_ns: pd.Series, last_token_ns: pd.Series,
            output_tokens: FloatArray) -> FloatArray:
    """TPOT = (last_token_ns − first_token_ns) / (output_tokens − 1), ms; NaN for ≤ 1
    token."""
    span = _f(last_token_ns) - _f(first_token_ns)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(output_tokens > 1, span / (output_tokens - 1), np.nan) / NS_PER_MS


def interactivity_tok_s(tpot: FloatArray) -> FloatArray:
    """Interactivity = 1 / TPOT, tokens/s per user (NaN where TPOT is NaN or 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(tpot > 0, 1000.0 / tpot, np.nan)


def streamed_tokens(events: pa.Table) -> FloatArray:
    """Σ tokens of the token-bearing events of each request (NaN when none recorded)."""
    col = events.column("token_event_tokens").combine_chunks()
    flat = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.float64)
    lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    csum = np.concatenate([[0.0], np.cumsum(flat)])
    total = csum[starts[1:]] - csum[starts[:-1]]
    return np.where(lengths > 0, total, np.nan)


def itl_ms(events: pa.Table) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """ITL: each gap between consecutive token-bearing events of a request, divided by the
    tokens the later event carried, ms. Returns (values in request order, number of values
    of each request)."""
    ns = events.column("token_event_ns").combine_chunks()
    tok = events.column("token_event_tokens").combine_chunks()
    t = pc.list_flatten(ns).to_numpy(zero_copy_only=False)
    k = pc.list_flatten(tok).to_numpy(zero_copy_only=False)
    lengths = pc.fill_null(pc.list_value_length(ns), 0).to_numpy(zero_copy_only=False)
    tok_lengths = pc.fill_null(pc.list_value_length(tok), 0).to_numpy(zero_copy_only=False)
    if len(t) != len(k) or not np.array_equal(lengths, tok_lengths):
        # rows an older writer left inconsistent (a stream cut by a malformed event kept
        # its event times but not their token counts): one token per event there
        bad = set(np.flatnonzero(lengths != tok_lengths).tolist())
        fixed = [[1] * int(lengths[i]) if i in bad else v
                 for i, v in enumerate(tok.to_pylist())]
        k = pc.list_flatten(pa.array(fixed, type=tok.type)).to_numpy(zero_copy_only=False)
    per_request = np.maximum(lengths.astype(np.int64) - 1, 0)
    if t.size < 2:
        return np.zeros(0), per_request
    starts = np.cumsum(lengths)[:-1]
    # few full-size temporaries: at millions of events, allocation is most of the cost
    gaps = np.empty(t.size - 1, dtype=np.float64)
    np.subtract(t[1:], t[:-1], out=gaps, casting="unsafe")
    with np.errstate(divide="ignore", invalid="ignore"):
        gaps /= k[1:]
    gaps[k[1:] <= 0] = np.nan  # an event that carried no token has no ITL
    gaps /= NS_PER_MS
    valid = np.ones(t.size - 1, dtype=bool)
    valid[starts[(starts > 0) & (starts < t.size)] - 1] = False  # gap into the next request
    vals = gaps[valid]
    return vals, per_request


@dataclass
class Derived:
    """The requests table plus every per-request metric, as aligned numpy arrays."""

    df: pd.DataFrame            # scalar request columns
    measured: npt.NDArray[np.bool_]
    ok: npt.NDArray[np.bool_]
    ttft_ms: FloatArray
    tpot_ms: FloatArray
    e2e_ms: FloatArray
    lag_ms: FloatArray
    interactivity: FloatArray
    input_tokens: FloatArray    # usage prompt_tokens, else the trace's expected input
    output_tokens: FloatArray   # usage completion_tokens, else streamed event tokens
    output_from_stream: npt.NDArray[np.bool_]
    cached_tokens: FloatArray   # usage; NaN when not reported
    prompt_tokens: FloatArray   # usage; NaN when not reported
    potential: FloatArray
    expected_input: FloatArray
    itl_ms: FloatArray
    itl_count: npt.NDArray[np.int64]  # ITL values of each request (they are in row order)
    sent_ns: FloatArray               # raw stamps as float64 (NaN = null), converted once
    end_ns: FloatArray
    scheduled_ns: FloatArray
    stage_code: npt.NDArray[np.int64]   # index into ``stages``
    stages: list[str]
    ep_code: npt.NDArray[np.int64]      # index into ``endpoints``
    endpoints: list[str]
    tree_code: npt.NDArray[np.int64]    # index into ``tree_keys`` ((stage, tree_id) pairs)
    tree_keys: pd.DataFrame
    # reported duration = measured wall duration x time_factor (the simulator's speedup
    # when the run is in simulated time, see ``timebase``); ns stamps above stay wall
    time_factor: float = 1.0
    #: usage the server reported that cannot be true (left out as if not reported)
    usage_invalid: npt.NDArray[np.bool_] = field(
        default_factory=lambda: np.zeros(0, dtype=bool))

    def ray_worker(self, workers: int) -> npt.NDArray[np.int64]:
        """Each request row's Ray load worker, of ``workers`` (run.json ``ray.workers``):
        worker ``w`` of ``W`` numbers its requests ``w, w + W, ...``."""
        return self.df["request_id"].to_numpy(dtype=np.int64) % workers


def _codes(col: pd.Series) -> tuple[npt.NDArray[np.int64], list[str]]:
    codes, uniques = pd.factorize(col, sort=False)
    return codes.astype(np.int64), [str(u) for u in uniques]


def derive(requests: pd.DataFrame, events: pa.Table, time_factor: float = 1.0) -> Derived:
    """Compute every per-request metric once; blocks and groups then select rows.
    ``time_factor`` scales the server-side durations (TTFT, TPOT, ITL, E2E; interactivity
    by its inverse) into the run's time base; schedule lag stays in wall time."""
    df = requests
    n = len(df)
    ok = (df["status"] == R.OK).to_numpy(dtype=bool)
    measured = (df["phase"] == R.MEASURE).to_numpy(dtype=bool)
    stage_code, stages = _codes(df["stage"])
    ep_code, endpoints = _codes(df["endpoint"])
    tid_code, tids = _codes(df["tree_id"])
    tree_code, pair = pd.factorize(stage_code * max(len(tids), 1) + tid_code, sort=False)
    pair = np.asarray(pair, dtype=np.int64)
    tree_keys = pd.DataFrame({
        "stage": np.asarray(stages, dtype=object)[pair // max(len(tids), 1)],
        "tree_id": np.asarray(tids, dtype=object)[pair % max(len(tids), 1)]})
    completion = _f(df["completion_tokens"])
    prompt = _f(df["prompt_tokens"])
    cached = _f(df["cached_tokens"])
    # impossible usage (negative counts, more cached than prompt tokens, a count above
    # USAGE_MAX) is not believed: the row's usage is treated as missing, and counted
    with np.errstate(invalid="ignore"):
        bad_usage = (prompt < 0) | (cached < 0) | (completion < 0) | (cached > prompt) \
            | (prompt > USAGE_MAX) | (completion > USAGE_MAX)
    if bad_usage.any():  # (copies: the columns may be read-only views of the Arrow data)
        prompt, cached, completion = prompt.copy(), cached.copy(), completion.copy()
        prompt[bad_usage] = cached[bad_usage] = completion[bad_usage] = np.nan
    has_events = events.num_rows == n and n > 0
    streamed = np.full(n, np.nan)
    missing = np.flatnonzero(np.isnan(completion))  # usage absent: count streamed tokens
    if has_events and missing.size:
        streamed[missing] = streamed_tokens(events.take(pa.array(missing)))
    from_stream = np.isnan(completion) & ~np.isnan(streamed)
    out_tok = np.where(np.isnan(completion), streamed, completion)
    expected_in = _f(df["expected_input_tokens"])
    itl, itl_count = itl_ms(events) if has_events else (np.zeros(0), np.zeros(n, np.int64))
    f = float(time_factor)
    if f != 1.0:
        itl *= f
    sent = _f(df["sent_ns"])
    first = _f(df["first_token_ns"])
    end = _f(df["end_ns"])
    sched = _f(df["scheduled_ns"])
    last = _f(df["last_token_ns"])
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tok > 1, (last - first) / (out_tok - 1), np.nan) / NS_PER_MS * f
    return Derived(
        df=df, measured=measured, ok=ok,
        ttft_ms=(first - sent) / NS_PER_MS * f,  # = ttft_ms() x f; converted once
        tpot_ms=tpot,                            # = tpot_ms() x f
        e2e_ms=(end - sent) / NS_PER_MS * f,     # = e2e_ms() x f
        lag_ms=(sent - sched) / NS_PER_MS,       # = schedule_lag_ms(), wall time
        interactivity=interactivity_tok_s(tpot),
        input_tokens=np.where(np.isnan(prompt), expected_in, prompt),
        output_tokens=out_tok,
        output_from_stream=from_stream,
        cached_tokens=cached,
        prompt_tokens=prompt,
        potential=_f(df["potential_cached_tokens"]),
        expected_input=expected_in,
        itl_ms=itl, itl_count=itl_count, sent_ns=sent, end_ns=end, scheduled_ns=sched,
        stage_code=stage_code, stages=stages, ep_code=ep_code, endpoints=endpoints,
        tree_code=tree_code.astype(np.int64), tree_keys=tree_keys, time_factor=f,
        usage_invalid=bad_usage,
    )
