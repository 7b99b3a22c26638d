"""Per-request latencies (CONTRACTS §5), vectorised over whole columns. Every function
takes nanosecond columns and returns float64 arrays in the unit its name says, NaN where
the value does not exist (no first token, ≤ 1 output token, request never sent)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from agentbench import records as R

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
    tokens the later event carried, ms. Returns (values, request row of each value)."""
    ns = events.column("token_event_ns").combine_chunks()
    tok = events.column("token_event_tokens").combine_chunks()
    t = pc.list_flatten(ns).to_numpy(zero_copy_only=False).astype(np.float64)
    k = pc.list_flatten(tok).to_numpy(zero_copy_only=False).astype(np.float64)
    if len(t) != len(k):
        raise ValueError("token_event_ns and token_event_tokens differ in length")
    if t.size < 2:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    parent = pc.list_parent_indices(ns).to_numpy(zero_copy_only=False).astype(np.int64)
    same = parent[1:] == parent[:-1]
    gaps = np.diff(t)[same]
    toks = k[1:][same]
    with np.errstate(divide="ignore", invalid="ignore"):
        vals = np.where(toks > 0, gaps / toks, np.nan) / NS_PER_MS
    return vals, parent[1:][same]


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
    itl_row: npt.NDArray[np.int64]


def derive(requests: pd.DataFrame, events: pa.Table) -> Derived:
    """Compute every per-request metric once; blocks and groups then select rows."""
    df = requests
    n = len(df)
    status = df["status"].to_numpy()
    ok = status == R.OK
    measured = df["phase"].to_numpy() == R.MEASURE
    completion = _f(df["completion_tokens"])
    has_events = events.num_rows == n and n > 0
    streamed = streamed_tokens(events) if has_events else np.full(n, np.nan)
    from_stream = np.isnan(completion) & ~np.isnan(streamed)
    out_tok = np.where(np.isnan(completion), streamed, completion)
    prompt = _f(df["prompt_tokens"])
    expected_in = _f(df["expected_input_tokens"])
    tpot = tpot_ms(df["first_token_ns"], df["last_token_ns"], out_tok)
    itl, itl_row = itl_ms(events) if has_events else (np.zeros(0), np.zeros(0, np.int64))
    return Derived(
        df=df, measured=measured, ok=ok,
        ttft_ms=ttft_ms(df["sent_ns"], df["first_token_ns"]),
        tpot_ms=tpot,
        e2e_ms=e2e_ms(df["sent_ns"], df["end_ns"]),
        lag_ms=schedule_lag_ms(df["scheduled_ns"], df["sent_ns"]),
        interactivity=interactivity_tok_s(tpot),
        input_tokens=np.where(np.isnan(prompt), expected_in, prompt),
        output_tokens=out_tok,
        output_from_stream=from_stream,
        cached_tokens=_f(df["cached_tokens"]),
        prompt_tokens=prompt,
        potential=_f(df["potential_cached_tokens"]),
        expected_input=expected_in,
        itl_ms=itl, itl_row=itl_row,
    )
