"""Fitting a simulator preset to a real engine (issue #23, ``agentbench sim fit``): the
simulator's step-time model (``sim/cost.py``, ``FittedCost``) fitted by non-negative least
squares to what runs against that engine measured (docs/simulator.md, "Fitting a preset").

An engine runs in steps, and while any request is in flight it is busy, so the time between
two instants of a request's life is the sum of the steps in between. Each successful
request gives two such windows:

* **first token**: from sent to the first token, the steps that prefilled it (and whatever
  ran beside it);
* **decode**: from the first token to the last, ``completion - 1`` steps, one per token.

Each step costs ``intercept + prefill_token x P + decode_token x D + attention_pair x A +
kv_token x K`` (``P`` new prompt tokens, ``D`` decoded tokens, ``A`` attention pairs, ``K``
KV tokens read, counted as the simulator counts them), so a window's length is the same
sum over its steps, linear in the five coefficients. The totals over a window come from
every request of the run: the decode tokens whose events fall in it (each at its context
length), and the prefill work of every request whose prefill overlaps it, in proportion to
the overlap (a prefill is spread evenly over its own window: the one approximation,
exact when requests do not overlap). Rows are weighted by ``1 / measured``, so the fit
minimises relative error, the measure the check reports.

What the records cannot say comes from the engine where it says it: the KV capacity from
vLLM's ``cache_config_info`` (scraped ``/metrics``) or the server command's ``-c``, the
slots from ``-np``, the step budget from ``--max-num-batched-tokens`` / ``-b``.
"""

from __future__ import annotations

import datetime as dt
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.errors import InputError

#: the model's terms, in ``StepFit.TERMS`` order: the step's five, then the time each request
#: spends outside the engine's steps (HTTP, tokenizing, the API server: ``request_s``)
TERMS = ("intercept_s", "prefill_token_s", "decode_token_s", "attention_pair_s",
         "kv_token_s", "request_s")
Matrix = npt.NDArray[np.float64]
#: token events this close together are taken as ends of one engine step
SAME_STEP_S = 1e-3


@dataclass
class Windows:
    """Observations: one row of term totals (``x``, columns as ``TERMS``) and the measured
    seconds (``y``) per window; ``kind`` "ttft" or "decode"; ``run`` the folder's name."""

    x: Matrix
    y: Matrix
    kind: list[str]
    run: list[str]

    @staticmethod
    def join(parts: list[Windows]) -> Windows:
        return Windows(np.vstack([p.x for p in parts]), np.concatenate([p.y for p in parts]),
                       [k for p in parts for k in p.kind], [r for p in parts for r in p.run])


@dataclass
class EngineFacts:
    """What a run says about its engine beyond the records (None: not said)."""

    family: str = "openai"  # "vllm", "llama.cpp" or the endpoint kind
    kv_capacity_tokens: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    sources: dict[str, str] = field(default_factory=dict)


@dataclass
class FitResult:
    """The fitted coefficients, the residuals by window kind and what was fitted on."""

    coef: dict[str, float]
    residuals: dict[str, float]
    observations: int
    inputs: list[str]
    facts: EngineFacts
    windows: Windows = field(repr=False)


# ------------------------------------------------------------------ windows of one run

def _flag(argv: list[str], *names: str) -> str | None:
    """The value after the last of ``names`` in ``argv`` (``--name=value`` too)."""
    val = None
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                val = argv[i + 1]
            elif a.startswith(n + "=") and n.startswith("--"):
                val = a.split("=", 1)[1]
    return val


def _int(v: Any) -> int | None:
    try:
        n = int(float(v))
    except (TypeError, ValueError, OverflowError):
        return None
    return n if 0 < n < 1 << 40 else None


def engine_facts(scenario: dict[str, Any], server_metrics: Any) -> EngineFacts:
    """The engine family, KV capacity and scheduler limits a run's scenario (its server
    command) and scraped metrics state."""
    server = scenario.get("server") or {}
    cmd = server.get("command") or ""
    argv = shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]
    text = " ".join(argv)
    f = EngineFacts()
    if "llama-server" in text or "llama_server" in text:
        f.family = "llama.cpp"
        n_ctx, slots = _int(_flag(argv, "-c", "--ctx-size")), _int(_flag(argv, "-np",
                                                                          "--parallel"))
        f.kv_capacity_tokens, f.max_num_seqs = n_ctx, slots
        f.max_num_batched_tokens = _int(_flag(argv, "-b", "--batch-size")) or 2048
        f.block_size = 1
        f.sources.update(kv_capacity_tokens="the server command's -c (n_ctx)",
                         max_num_seqs="the server command's -np (slots)",
                         max_num_batched_tokens="the server command's -b (n_batch; "
                         "llama-server's default 2048)",
                         block_size="llama.cpp reuses a prompt token by token")
    elif "vllm" in text:
        f.family = "vllm"
        f.max_num_seqs = _int(_flag(argv, "--max-num-seqs"))
        f.max_num_batched_tokens = _int(_flag(argv, "--max-num-batched-tokens"))
        f.block_size = _int(_flag(argv, "--block-size"))
        for k, what in (("max_num_seqs", "--max-num-seqs"),
                        ("max_num_batched_tokens", "--max-num-batched-tokens"),
                        ("block_size", "--block-size")):
            if getattr(f, k) is not None:
                f.sources[k] = f"the server command's {what}"
    sm = server_metrics
    if sm is not None and len(sm) and "name" in sm:
        info = sm[sm["name"] == "vllm:cache_config_info"]
        if len(info):
            labels = _labels(info.iloc[-1]["labels"])
            blocks, bs = _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size"))
            if blocks and bs:
                f.family = "vllm"
                f.kv_capacity_tokens, f.block_size = blocks * bs, bs
                f.sources.update(kv_capacity_tokens="vLLM's cache_config_info "
                                 f"(num_gpu_blocks {blocks} x block_size {bs})",
                                 block_size="vLLM's cache_config_info")
            seqs = _int(labels.get("max_num_seqs"))
            if seqs and f.max_num_seqs is None:
                f.max_num_seqs = seqs
                f.sources["max_num_seqs"] = "vLLM's cache_config_info"
    return f


def _labels(v: Any) -> dict[str, str]:
    if isinstance(v, dict):
        return {str(k): str(x) for k, x in v.items()}
    if isinstance(v, list):  # pyarrow map as a list of pairs
        return {str(k): str(x) for k, x in v}
    out = {}
    for part in str(v or "").split(","):
        k, _, x = part.partition("=")
        out[k.strip()] = x.strip()
    return out


def run_windows(run_dir: str | Path, budget: int | None = None,
                lead: float = 0.0) -> tuple[Windows,
                                                                         EngineFacts]:
    """The windows of one finished run (see the module's docstring) and its engine facts;
    ``budget``: tokens per step (a prefill longer than it takes several steps); ``lead``:
    seconds from sending a request to its reaching the engine (the fit's ``request_s``)."""
    from agentbench.metrics.run import load

    run = load(Path(run_dir))
    rec = run.records
    sec = run.time_base.factor / 1e9  # ns stamps to seconds of the run's time base
    facts = engine_facts(run.scenario, rec.server_metrics)
    budget = budget or facts.max_num_batched_tokens or 2048
    req = rec.requests
    ok = (req["status"] == "ok").to_numpy() & req["first_token_ns"].notna().to_numpy() \
        & req["prompt_tokens"].notna().to_numpy() & req["cached_tokens"].notna().to_numpy()
    idx = np.flatnonzero(ok)
    if len(idx) == 0:
        raise InputError("no successful request with usage to fit on", source=str(run_dir))
    ev_ns = rec.events.column("token_event_ns").to_pylist()
    ev_tok = rec.events.column("token_event_tokens").to_pylist()
    sent = req["sent_ns"].to_numpy(dtype=np.float64)[idx] * sec
    first = req["first_token_ns"].to_numpy(dtype=np.float64)[idx] * sec
    prompt = req["prompt_tokens"].to_numpy(dtype=np.float64)[idx]
    cached = req["cached_tokens"].to_numpy(dtype=np.float64)[idx]
    new = np.maximum(prompt - cached, 1.0)  # the last prompt token is always computed
    cached = prompt - new
    # decode events: (time, tokens, context) after each request's first event
    t_l, n_l, c_l, r_l, last = [], [], [], [], np.empty(len(idx))
    for k, i in enumerate(idx):
        ts = np.asarray(ev_ns[i] or [], dtype=np.float64) * sec
        ns = np.asarray(ev_tok[i] or [], dtype=np.float64)
        last[k] = ts[-1] if len(ts) else first[k]
        if len(ts) > 1:
            ctx = prompt[k] + np.cumsum(ns)[:-1]  # context before each later event's tokens
            t_l.append(ts[1:])
            n_l.append(ns[1:])
            c_l.append(ctx)
            r_l.append(np.full(len(ts) - 1, k))
    ev_t = np.concatenate(t_l) if t_l else np.zeros(0)
    ev_n = np.concatenate(n_l) if n_l else np.zeros(0)
    ev_c = np.concatenate(c_l) if c_l else np.zeros(0)
    ev_r = np.concatenate(r_l) if r_l else np.zeros(0, dtype=np.int64)
    order = np.argsort(ev_t, kind="stable")
    ev_t, ev_n, ev_c, ev_r = ev_t[order], ev_n[order], ev_c[order], ev_r[order]
    cum_n = np.concatenate([[0.0], np.cumsum(ev_n)])
    cum_nc = np.concatenate([[0.0], np.cumsum(ev_n * ev_c)])
    chunks = np.ceil(new / budget)
    pre = np.stack([new, new * (cached + new / 2),
                    chunks * cached + new * (chunks + 1) / 2], axis=1)  # P, A, K

    def totals(a: float, b: float, steps: float, request: float = 0.0) -> list[float]:
        lo, hi = np.searchsorted(ev_t, a, "right"), np.searchsorted(ev_t, b, "right")
        d, dc = cum_n[hi] - cum_n[lo], cum_nc[hi] - cum_nc[lo]
        done = ((first > a) & (first <= b)).astype(np.float64)
        p, at, kv = done @ pre
        return [steps, p, d, at + dc, kv + dc, request]

    rows, ys, kinds = [], [], []
    # step ends the records show: every token event, first tokens included
    ends = np.sort(np.concatenate([ev_t, first]))
    for k in range(len(idx)):
        # a request reaching the engine during a step waits for its end: its window
        # starts at the next step end seen before its own first token; if none is seen,
        # when it was sent, and the window holds its time outside the steps
        b = first[k]
        at = sent[k] + lead
        nxt = ends[min(np.searchsorted(ends, at, "right"), len(ends) - 1)]
        # (events of one step reach the client a little apart: a start within SAME_STEP_S
        # of the first token is that step's own end)
        a, outside = (nxt, 0.0) if at < nxt < b - SAME_STEP_S else (sent[k], 1.0)
        lo, hi = np.searchsorted(ev_t, a, "right"), np.searchsorted(ev_t, b, "right")
        # every step gives each decoding request a token: at least as many steps as the
        # most tokens one request decoded in the window
        beside = float(np.bincount(ev_r[lo:hi], ev_n[lo:hi]).max()) if hi > lo else 0.0
        rows.append(totals(a, b, max(chunks[k], beside), outside))
        ys.append(b - a)
        kinds.append("ttft")
        if last[k] > first[k]:
            steps = float(np.sum(np.asarray(ev_tok[idx[k]], dtype=np.float64)[1:]))
            rows.append(totals(first[k], last[k], steps))
            ys.append(last[k] - first[k])
            kinds.append("decode")
    name = Path(run_dir).name
    w = Windows(np.asarray(rows, dtype=np.float64), np.asarray(ys, dtype=np.float64), kinds,
                [name] * len(ys))
    keep = w.y > 0
    return Windows(w.x[keep], w.y[keep], [k for k, g in zip(w.kind, keep, strict=True) if g],
                   [r for r, g in zip(w.run, keep, strict=True) if g]), facts


# ------------------------------------------------------------------ the fit

def nnls_fit(w: Windows) -> tuple[Matrix, Matrix]:
    """Coefficients (``TERMS`` order, each >= 0) minimising the relative error of every
    window, and each window's prediction."""
    from scipy.optimize import nnls

    scale = 1.0 / w.y
    a = w.x * scale[:, None]
    col = np.linalg.norm(a, axis=0)
    col[col == 0] = 1.0  # a term never seen: its coefficient stays 0
    sol, _ = nnls(a / col, np.ones(len(w.y)), maxiter=50 * a.shape[1])
    coef = sol / col
    return coef, w.x @ coef


def residuals(w: Windows, pred: Matrix) -> dict[str, float]:
    """Median and p90 of |predicted - measured| / measured, by window kind."""
    err = np.abs(pred / w.y - 1.0)
    out: dict[str, float] = {}
    kinds = np.asarray(w.kind)
    for kind in ("ttft", "decode"):
        e = err[kinds == kind]
        if len(e):
            out[f"{kind}_median"] = round(float(np.median(e)), 4)
            out[f"{kind}_p90"] = round(float(np.quantile(e, 0.9)), 4)
    return out


def fit_runs(run_dirs: Sequence[str | Path], budget: int | None = None) -> FitResult:
    """Fit the step model to one or more finished runs against the same engine."""
    if not run_dirs:
        raise InputError("name at least one run folder to fit on")
    lead = 0.0
    for _ in range(2):  # the second pass starts the windows where requests reach the engine
        parts, facts = [], []
        for rd in run_dirs:
            w, f = run_windows(rd, budget, lead)
            parts.append(w)
            facts.append(f)
        w = Windows.join(parts)
        if len(w.y) < 2 * len(TERMS):
            raise InputError(f"{len(w.y)} windows in the runs: a fit of {len(TERMS)} terms "
                             f"needs at least {2 * len(TERMS)}")
        coef, pred = nnls_fit(w)
        lead = float(coef[-1])
    if not np.all(np.isfinite(coef)) or not np.any(coef > 0):
        raise InputError("the fit found no positive step time: the runs hold too few "
                         "distinct windows")
    merged = facts[0]
    for f in facts[1:]:  # the first run's facts, gaps filled by the others'
        for k in ("kv_capacity_tokens", "block_size", "max_num_seqs",
                  "max_num_batched_tokens"):
            if getattr(merged, k) is None and getattr(f, k) is not None:
                setattr(merged, k, getattr(f, k))
                merged.sources[k] = f.sources.get(k, "")
    return FitResult(coef=dict(zip(TERMS, map(float, coef), strict=True)),
                     residuals=residuals(w, pred), observations=len(w.y),
                     inputs=[str(Path(r)) for r in run_dirs], facts=merged, windows=w)


# ------------------------------------------------------------------ the preset

def fitted_preset(fit: FitResult, *, name: str, engine: str | None = None,
                  engine_version: str | None = None, model: str = "unknown model",
                  hardware: str = "unknown hardware", scheduler: str | None = None,
                  kv_capacity_tokens: int | None = None, max_num_seqs: int | None = None,
                  max_num_batched_tokens: int | None = None,
                  natural_output_tokens: int = 256) -> Any:
    """The ``Preset`` of a fit: its coefficients, the engine's capacity and limits (given
    here, else from the runs), provenance naming the runs and the residuals."""
    from agentbench.sim.cost import StepFit
    from agentbench.sim.presets import Preset, Provenance

    f = fit.facts
    family = f.family
    given = {"kv_capacity_tokens": kv_capacity_tokens, "max_num_seqs": max_num_seqs,
             "max_num_batched_tokens": max_num_batched_tokens}
    vals: dict[str, int] = {}
    src: dict[str, str] = {}
    defaults = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
    for k, v in given.items():
        if v is not None:
            vals[k], src[k] = v, "set by sim fit's option"
        elif getattr(f, k) is not None:
            vals[k], src[k] = getattr(f, k), f.sources.get(k, "the runs")
        elif k in defaults:
            vals[k], src[k] = defaults[k], f"assumption: not stated by the runs ({family})"
        else:
            raise InputError("the runs do not say the engine's KV capacity: pass "
                             "--kv-capacity-tokens", field="--kv-capacity-tokens")
    sched = scheduler or ("slots" if family == "llama.cpp" else "paged")
    fitted = f"fitted by sim fit on {len(fit.inputs)} run(s), {fit.observations} windows"
    figures = [("max_num_batched_tokens", src["max_num_batched_tokens"]),
               ("max_num_seqs", src["max_num_seqs"]),
               ("cpu_load_s_per_token", "assumption: no CPU offload tier"),
               ("shared_load_s_per_token", "assumption: no shared tier"),
               ("natural_output_tokens", "assumption: mean output when not forced"),
               ("kv_capacity_tokens", src["kv_capacity_tokens"])]
    figures += [(k, fitted) for k in TERMS]
    notes = ["residuals on the fitted windows (|predicted / measured - 1|): "
             + ", ".join(f"{k} {v:.3f}" for k, v in fit.residuals.items())]
    if f.block_size:
        notes.append(f"the engine's KV block size: {f.block_size} "
                     f"({f.sources.get('block_size', 'the runs')})")
    prov = Provenance(engine=engine or family, engine_version=engine_version, model=model,
                      hardware=hardware, date=dt.date.today().isoformat(),
                      sources=tuple(fit.inputs), notes=tuple(notes), figures=tuple(figures))
    zero = {k: 0 for k in ("params", "layers", "hidden", "kv_bytes_per_token",
                           "weight_bytes", "peak_flops", "mfu", "hbm_bytes_per_s", "mbu",
                           "hbm_bytes", "gpu_memory_utilization",
                           "activation_reserve_bytes", "step_overhead_s")}
    c = fit.coef
    return Preset(name=name, summary=f"{engine or family} fitted to {len(fit.inputs)} run(s)",
                  provenance=prov, cpu_load_s_per_token=0.0, shared_load_s_per_token=0.0,
                  natural_output_tokens=natural_output_tokens,
                  kv_capacity_tokens=vals["kv_capacity_tokens"],
                  max_num_seqs=vals["max_num_seqs"],
                  max_num_batched_tokens=vals["max_num_batched_tokens"],
                  step_fit=StepFit(**c), scheduler=sched,
                  fit_summary={"method": "non-negative least squares on request windows, "
                               "rows weighted 1/measured (agentbench sim fit)",
                               "observations": fit.observations, "inputs": fit.inputs,
                               "residuals": fit.residuals},
                  **zero)


def format_fit(fit: FitResult) -> str:
    """The coefficients and residuals as ``sim fit`` prints them."""
    lines = [f"fitted on {fit.observations} windows from {len(fit.inputs)} run(s) "
             f"({fit.facts.family})"]
    unit = {"intercept_s": "s per step", "prefill_token_s": "s per new prompt token",
            "decode_token_s": "s per decoded token",
            "attention_pair_s": "s per attention pair", "kv_token_s": "s per KV token read",
            "request_s": "s per request outside the steps (HTTP, tokenizing)"}
    for k in TERMS:
        lines.append(f"  {k:<17} {fit.coef[k]:.4g} {unit[k]}")
    lines.append("  residuals (|predicted / measured - 1| on the fitted windows): "
                 + ", ".join(f"{k} {v:.1%}" for k, v in fit.residuals.items()))
    if not math.isfinite(sum(fit.coef.values())):
        lines.append("  warning: a coefficient is not finite")
    return "\n".join(lines)
