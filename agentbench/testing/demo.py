"""A synthetic results folder with the exact on-disk layout replay writes
(docs/architecture.md#results-on-disk), drawn from a simple seeded latency model: for tests,
docs, the notebook and the metrics benchmark. Its figures describe no engine; they only
exercise the code that reads runs.

Model: lanes run session trees back to back; turn k's context grows by ``growth`` tokens;
the prefix already sent is the potential cache, of which ``hit`` is reused; TTFT =
``ttft_base_ms`` + uncached tokens × ``prefill_ms_per_ktok`` / 1000, × lognormal noise ×
``ttft_scale``; TPOT grows with concurrency."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from agentbench.results import schema as R

MS = 1_000_000


def _lists(values: np.ndarray, lengths: np.ndarray, typ: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, typ))


def demo_scenario(name: str, gpus: float, concurrency: Sequence[int]) -> dict[str, Any]:
    """The scenario recorded in run.json (valid for ``agentbench.scenario.model.Scenario``)."""
    return {
        "name": name, "description": "synthetic demo run <not a measurement>", "seed": 0,
        "endpoints": [{"kind": "simulated", "name": "sim"}],
        "trace": {"kind": "synth", "profile": "agentx", "sessions": 8},
        "load": {"kind": "lanes", "concurrency": list(concurrency)},
        "limits": {"max_sessions": 8, "recycle": False},
        "hardware": {"gpus": gpus, "gpu_hour_usd": 3.5},
        "prices": {"input_per_mtok": 3.0, "cached_input_per_mtok": 0.3,
                   "output_per_mtok": 15.0},
        "slos": {"ttft_ms": 2000, "tpot_ms": 50},
    }


def write_demo_run(out: str | Path, *, trees: int = 16, turns: int = 30,
                   concurrency: Sequence[int] = (4,), endpoints: Sequence[str] = ("sim",),
                   seed: int = 0, hit: float = 0.9, ttft_scale: float = 1.0,
                   ttft_base_ms: float = 40.0, prefill_ms_per_ktok: float = 80.0,
                   growth: int = 3000, events: int = 8, fail_rate: float = 0.01,
                   warmup: int = 2, gpus: float = 1.0, name: str = "demo") -> Path:
    """Write requests/sessions/server_metrics parquet and run.json under ``out``; every
    stage replays ``trees`` trees of ``turns`` turns on ``concurrency`` lanes."""
    rng = np.random.default_rng(seed)
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    cols: dict[str, list[np.ndarray]] = {}
    sess_rows: list[dict[str, Any]] = []
    t0 = 0
    for conc in concurrency:
        stage = f"c={conc}"
        n_tr = trees + warmup
        n = n_tr * turns
        tree = np.repeat(np.arange(n_tr), turns)
        turn = np.tile(np.arange(turns), n_tr)
        lane = tree % conc
        phase = np.where(tree < warmup, R.WARMUP, R.MEASURE)
        inp = (1500 + (turn + 1) * growth * rng.uniform(0.8, 1.2, n)).astype(np.int64)
        pot = np.where(turn > 0, np.minimum(inp, 1500 + turn * growth * 0.8), 0).astype(np.int64)
        cached = (pot * hit // 16 * 16).astype(np.int64)
        out_tok = np.clip(rng.lognormal(np.log(200), 0.6, n), 2, 2000).astype(np.int64)
        ttft = (ttft_base_ms + (inp - cached) * prefill_ms_per_ktok / 1000) \
            * rng.lognormal(0, 0.25, n) * ttft_scale
        tpot = 8.0 * (1 + 0.05 * conc) * rng.lognormal(0, 0.1, n)
        e2e = ttft + tpot * (out_tok - 1) + 1.0
        think = rng.exponential(2000.0, n)
        failed = rng.random(n) < fail_rate
        e2e = np.where(failed, ttft * 0.5, e2e)
        start = _lane_starts(lane, tree, turn, think + e2e)
        sched = t0 + (start * MS).astype(np.int64) + warmup * 0
        lag = rng.integers(0, 200_000, n)
        sent = sched + lag
        first_ns = sent + (ttft * MS).astype(np.int64)
        end_ns = sent + (e2e * MS).astype(np.int64)
        last_ns = np.where(failed, first_ns, end_ns - MS)
        n_ev, ev_ns, ev_tok = _token_events(first_ns, last_ns, out_tok, failed, events)
        ep = np.asarray(endpoints, dtype=object)[tree % len(endpoints)]
        tree_id = np.char.add(np.char.add("s", tree.astype(str)), "#0").astype(object)
        part = {
            "stage": np.full(n, stage, dtype=object), "phase": phase.astype(object),
            "endpoint": ep, "lane": lane.astype(np.int32), "tree_id": tree_id,
            "session_id": tree_id, "relation": np.full(n, "root", dtype=object),
            "copy": np.zeros(n, np.int32), "turn": turn.astype(np.int32),
            "scheduled_ns": sched, "sent_ns": sent,
            "first_token_ns": np.where(failed, -1, first_ns),
            "last_token_ns": np.where(failed, -1, last_ns), "end_ns": end_ns,
            "token_events": n_ev.astype(np.int32),
            "prompt_tokens": np.where(failed, -1, inp),
            "completion_tokens": np.where(failed, -1, out_tok),
            "cached_tokens": np.where(failed, -1, cached),
            "expected_input_tokens": inp, "expected_output_tokens": out_tok,
            "potential_cached_tokens": pot,
            "status": np.where(failed, R.ERROR, R.OK).astype(object),
            "http_status": np.where(failed, 500, 200).astype(np.int32),
            "failed": failed, "_ev_ns": ev_ns, "_ev_tok": ev_tok, "_n_ev": n_ev,
        }
        for key, v in part.items():
            cols.setdefault(key, []).append(np.asarray(v))
        sess_rows += _session_rows(stage, part, n_tr, turns)
        t0 = int(end_ns.max()) + 1000 * MS
    c = {k: np.concatenate(v) for k, v in cols.items()}
    failed_all = c.pop("failed")
    pq.write_table(_requests_table(c, failed_all), d / R.REQUESTS_FILE)
    pq.write_table(pa.Table.from_pylist(sess_rows, schema=R.SESSIONS_SCHEMA),
                   d / R.SESSIONS_FILE)
    _write_counters(d, c, failed_all, endpoints)
    run = {"run_id": d.name, "agentbench_version": "demo", "seed": seed,
           "scenario": demo_scenario(name, gpus, concurrency)}
    (d / R.RUN_FILE).write_text(json.dumps(run, indent=1))
    return d


def _lane_starts(lane: np.ndarray, tree: np.ndarray, turn: np.ndarray,
                 step: np.ndarray) -> np.ndarray:
    """Each request's start, ms from the stage's start: each lane runs its trees back to
    back (a turn after the previous one's E2E and think time, ``step``)."""
    order = np.lexsort((turn, tree, lane))
    start = np.empty(len(lane))
    lane_sorted = lane[order]
    cs = np.cumsum(step[order]) - step[order]
    first = np.r_[True, lane_sorted[1:] != lane_sorted[:-1]]
    base = np.maximum.accumulate(np.where(first, cs, -np.inf))
    start[order] = cs - base
    return start


def _token_events(first_ns: np.ndarray, last_ns: np.ndarray, out_tok: np.ndarray,
                  failed: np.ndarray, events: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to ``events`` token events per request, evenly from its first token to its last
    (none for a failed one): their count per request, then each event's time and tokens
    (the first event one token, the last the rest)."""
    n_ev = np.where(failed, 0, np.minimum(events, out_tok))
    idx = np.repeat(np.arange(len(n_ev)), n_ev)
    k = np.arange(n_ev.sum()) - np.repeat(np.cumsum(n_ev) - n_ev, n_ev)
    frac = np.where(n_ev[idx] > 1, k / np.maximum(n_ev[idx] - 1, 1), 0.0)
    ev_ns = first_ns[idx] + (frac * (last_ns - first_ns)[idx]).astype(np.int64)
    per = out_tok // np.maximum(n_ev, 1)
    ev_tok = np.where(k == 0, 1, per[idx])
    ev_tok = np.where(k == n_ev[idx] - 1, out_tok[idx] - 1 - per[idx] * (n_ev[idx] - 2),
                      ev_tok) if events > 1 else ev_tok
    return n_ev, ev_ns, ev_tok


def _session_rows(stage: str, part: dict[str, Any], n_tr: int, turns: int
                  ) -> list[dict[str, Any]]:
    """One sessions row per tree of a stage's requests (``part``: its columns, each tree's
    ``turns`` requests in a row)."""
    rows = []
    phase, tree_id, lane, ep = part["phase"], part["tree_id"], part["lane"], part["endpoint"]
    sent, end_ns, failed = part["sent_ns"], part["end_ns"], part["failed"]
    inp, out_tok = part["expected_input_tokens"], part["expected_output_tokens"]
    for tr in range(n_tr):
        sl = slice(tr * turns, (tr + 1) * turns)
        rows.append({
            "stage": stage, "phase": phase[sl][0], "tree_id": tree_id[sl][0],
            "session_id": tree_id[sl][0], "parent_id": None, "relation": "root",
            "lane": int(lane[sl][0]), "copy": 0, "endpoint": ep[sl][0],
            "turns_planned": turns, "turns_done": turns, "start_ns": int(sent[sl].min()),
            "end_ns": int(end_ns[sl].max()),
            "makespan_ns": int(end_ns[sl].max() - sent[sl].min()),
            "llm_wait_ns": int((end_ns[sl] - sent[sl]).sum()),
            "input_tokens": int(inp[sl].sum()), "output_tokens": int(out_tok[sl].sum()),
            "status": R.ERROR if failed[sl].any() else R.OK,
        })
    return rows


def _requests_table(c: dict[str, np.ndarray], failed_all: np.ndarray) -> pa.Table:
    """The requests table of every stage's columns ``c``, in the row schema: a failed
    request has no token times or usage, and its error says HTTP 500."""
    n_all = len(c["stage"])
    arrays: dict[str, pa.Array] = {"request_id": pa.array(np.arange(n_all), pa.int64())}
    for f in R.REQUESTS_SCHEMA:
        if f.name == "request_id":
            continue
        if f.name == "token_event_ns":
            arrays[f.name] = _lists(c["_ev_ns"], c["_n_ev"], pa.int64())
        elif f.name == "token_event_tokens":
            arrays[f.name] = _lists(c["_ev_tok"], c["_n_ev"], pa.int32())
        elif f.name in ("first_token_ns", "last_token_ns", "prompt_tokens",
                        "completion_tokens", "cached_tokens"):
            arrays[f.name] = pa.array(c[f.name], f.type, mask=failed_all)
        elif f.name in R.BREAKDOWN:  # a real endpoint's rows: not known
            arrays[f.name] = pa.nulls(n_all, f.type)
        elif f.name in ("error_type", "error_message"):
            text = "http" if f.name == "error_type" else "HTTP 500"
            arrays[f.name] = pa.array([text if x else None for x in failed_all], f.type)
        else:
            arrays[f.name] = pa.array(c[f.name], f.type)
    return pa.Table.from_arrays([arrays[f.name] for f in R.REQUESTS_SCHEMA],
                                schema=R.REQUESTS_SCHEMA)


def _write_counters(d: Path, c: dict[str, np.ndarray], failed: np.ndarray,
                    endpoints: Sequence[str]) -> None:
    """vLLM-named prefix cache counters, scraped once a second, consistent with usage."""
    rows: list[dict[str, Any]] = []
    end = c["end_ns"]
    span = int(end.max()) - int(c["scheduled_ns"].min())
    step = max(1000 * MS, span // 2000)  # 1 s scrapes, at most ~2,000 of them
    times = np.arange(int(c["scheduled_ns"].min()) - step, int(end.max()) + 2 * step, step)
    for ep in endpoints:
        m = (c["endpoint"] == ep) & ~failed
        order = np.argsort(end[m])
        e = end[m][order]
        for name, vals in (("vllm:prefix_cache_hits_total", c["cached_tokens"][m][order]),
                           ("vllm:prefix_cache_queries_total", c["prompt_tokens"][m][order])):
            cum = np.concatenate([[0], np.cumsum(vals)])
            at = cum[np.searchsorted(e, times, side="right")]
            rows.extend({"time_ns": int(t), "endpoint": ep, "name": name,
                         "labels": [("model_name", "sim")], "value": float(v)}
                        for t, v in zip(times, at, strict=True))
    pq.write_table(pa.Table.from_pylist(rows, schema=R.SERVER_METRICS_SCHEMA),
                   d / R.SERVER_METRICS_FILE)
