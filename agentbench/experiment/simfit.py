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

A llama.cpp server also stops for its host-RAM prompt cache: at each new task it saves the
prompt of every idle slot it has not saved yet, and nothing else runs meanwhile. The grid's
save probe (``simgrid``, trace ``sim-fit-save``) measures that cost per token saved
(``save_cost``); its run is kept out of the windows, and the preset prices the slots
model's copies with it (``cpu_load_s_per_token``).

What the records cannot say comes from the engine where it says it: the KV capacity from
vLLM's ``cache_config_info`` (scraped ``/metrics``) or the server command's ``-c``, the
slots from ``-np``, the step budget from ``--max-num-batched-tokens`` / ``-b``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agentbench.errors import InputError
from agentbench.experiment.enginefacts import EngineFacts, engine_facts, log_version
from agentbench.experiment.savecost import SaveCost, is_save_probe, save_cost
from agentbench.sim.cost import STEP_FIT_TERMS

#: the model's terms (``STEP_FIT_TERMS``): the step's five, then the time each request
#: spends outside the engine's steps (HTTP, tokenizing, the API server: ``request_s``)
TERMS = STEP_FIT_TERMS
Matrix = npt.NDArray[np.float64]
#: token events this close together are always taken as ends of one engine step; a run
#: whose requests' tokens come further apart allows more (``_same_step``)
SAME_STEP_S = 1e-3
#: ... up to this share of the shortest gaps between one request's tokens (their 5th
#: percentile): the events of one step reach a busy client that far apart (1.7 ms for
#: eight streams on a loaded 2-core machine, 2026-12-02), while one step takes longer
SAME_STEP_SHARE = 0.5


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
class FitResult:
    """The fitted coefficients, the residuals by window kind and what was fitted on; the
    save probe's cost when a run of it was given."""

    coef: dict[str, float]
    residuals: dict[str, float]
    observations: int
    inputs: list[str]
    facts: EngineFacts
    windows: Windows = field(repr=False)
    save: SaveCost | None = None
    save_error: str | None = None  # why a save probe given gave no cost
    #: what makes the fit less than one engine's (a run spread over several engines)
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ windows of one run

def run_timeline(run_dir: str | Path, budget: int | None = None
                 ) -> tuple[_Timeline, EngineFacts]:
    """One finished run read once: its timeline (``windows`` gives its windows for any
    ``lead``) and its engine facts; ``budget``: tokens per step (a longer prefill takes
    several steps)."""
    from agentbench.metrics.run import load

    run = load(Path(run_dir))
    rec = run.records
    facts = engine_facts(run.scenario, rec.server_metrics)
    facts.engine_version = log_version(Path(run_dir) / "server.log")
    t = _Timeline(rec, run.time_base.factor / 1e9, str(run_dir))
    facts.token_ratio = t.token_ratio
    facts.long_prompt_ratio = t.long_ratio
    facts.longest_prompt = float((t.new + t.cached).max())
    # the step budget in the simulator's tokens
    t.chunk_prefills(max(1.0, (budget or facts.max_num_batched_tokens or 2048)
                         / t.token_ratio))
    return t, facts


class _Timeline:
    """One run's successful requests as the engine saw them, in the simulator's tokens:
    decode events (time, tokens, context, request) and prefill chunks (the time their
    step ended, tokens, tokens present before them), each sorted by time with running
    sums, so a window's totals are a few binary searches."""

    def __init__(self, rec: Any, sec: float, source: str) -> None:
        req = rec.requests
        ok = (req["status"] == "ok").to_numpy() & req["first_token_ns"].notna().to_numpy() \
            & req["prompt_tokens"].notna().to_numpy() & req["cached_tokens"].notna().to_numpy()
        idx = np.flatnonzero(ok)
        if len(idx) == 0:
            raise InputError("no successful request with usage to fit on", source=source)
        self.name = Path(source).name

        def col(name: str) -> Matrix:
            return req[name].to_numpy(dtype=np.float64)[idx]

        self.sent, self.first = col("sent_ns") * sec, col("first_token_ns") * sec
        prompt, cached, expected = col("prompt_tokens"), col("cached_tokens"), \
            col("expected_input_tokens")
        # in the simulator's tokens: the trace's count, cached in the engine's proportion
        # (an engine's tokenizer may count the same text otherwise: llama.cpp's vocabulary
        # here about 2.1x; the coefficients must be per token as the simulator counts them)
        ratio = np.where(expected > 0, prompt / np.maximum(expected, 1.0), 1.0)
        self.token_ratio = float(np.median(ratio))
        long = expected >= 0.5 * expected.max()  # the longest prompts, at least one
        self.long_ratio = float(ratio[long].min()) if long.any() else self.token_ratio
        prompt, cached = prompt / ratio, cached / ratio
        self.new = np.maximum(prompt - cached, 1.0)  # the last prompt token is computed
        self.cached = np.maximum(prompt - self.new, 0.0)
        ev_ns = rec.events.column("token_event_ns").to_pylist()
        ev_tok = rec.events.column("token_event_tokens").to_pylist()
        parts: list[list[Matrix]] = [[], [], [], []]  # times, tokens, contexts, requests
        self.last, self.decoded = np.empty(len(idx)), np.zeros(len(idx))
        for k, i in enumerate(idx):
            ts = np.asarray(ev_ns[i] or [], dtype=np.float64) * sec
            ns = np.asarray(ev_tok[i] or [], dtype=np.float64)
            self.last[k] = ts[-1] if len(ts) else self.first[k]
            if len(ts) > 1:  # the events after the first: decode steps
                parts[0].append(ts[1:])
                parts[1].append(ns[1:])
                parts[2].append(prompt[k] + np.cumsum(ns)[:-1])  # context before each
                parts[3].append(np.full(len(ts) - 1, float(k)))
                self.decoded[k] = float(ns[1:].sum())
        ev = [np.concatenate(p) if p else np.zeros(0) for p in parts]
        order = np.argsort(ev[0], kind="stable")
        self.ev_t, self.ev_n, ev_c, self.ev_r = (e[order] for e in ev)
        self.cum_n = np.concatenate([[0.0], np.cumsum(self.ev_n)])
        self.cum_nc = np.concatenate([[0.0], np.cumsum(self.ev_n * ev_c)])
        # step ends the records show: every token event, first tokens included; the
        # events of one step (within same_step of each other) all at the earliest of them,
        # the one the client read nearest the step's end; the step ends are then distinct
        same_step = _same_step([np.diff(np.asarray(ev_ns[i] or [], dtype=np.float64))
                                     * sec for i in idx])
        ends = np.sort(np.concatenate([self.ev_t, self.first]))
        step = np.concatenate([[0], np.cumsum(np.diff(ends) > same_step)])
        self.ends = ends[np.concatenate([[0], np.flatnonzero(np.diff(step)) + 1])]

        def at_step_end(t: Matrix) -> Matrix:
            return self.ends[step[np.searchsorted(ends, t, "left")]]

        self.ev_t, self.first, self.last = (at_step_end(t) for t in
                                            (self.ev_t, self.first, self.last))

    def chunk_prefills(self, budget: float) -> None:
        """Split each prefill into steps of ``budget`` tokens, the last ending at its first
        token and the earlier ones at the step ends seen before it (after it was sent);
        where none is seen, with its last step."""
        self.chunks = np.ceil(self.new / budget)
        t_l, n_l, p_l = [], [], []
        for k in range(len(self.sent)):
            c = int(self.chunks[k])
            sizes = np.full(c, budget)
            sizes[-1] = self.new[k] - budget * (c - 1)
            pos = self.cached[k] + np.concatenate([[0.0], np.cumsum(sizes)[:-1]])
            lo = np.searchsorted(self.ends, self.sent[k], "right")
            hi = np.searchsorted(self.ends, self.first[k], "left")  # steps before its own
            seen = self.ends[lo:hi][-(c - 1):] if c > 1 else np.zeros(0)
            at = np.full(c, self.first[k])
            at[c - 1 - len(seen):c - 1] = seen
            t_l.append(at)
            n_l.append(sizes)
            p_l.append(pos)
        t, n, pos = (np.concatenate(v) for v in (t_l, n_l, p_l))
        order = np.argsort(t, kind="stable")
        self.pre_t = t[order]
        n, pos = n[order], pos[order]
        self.cum_pre = np.vstack([np.zeros(3), np.cumsum(np.stack(
            [n, n * (pos + n / 2), pos + n], axis=1), axis=0)])  # P, A, K

    def windows(self, lead: float) -> Windows:
        """The run's windows (see the module's docstring); ``lead``: seconds from sending a
        request to its reaching the engine (the fit's ``request_s``)."""
        rows, ys, kinds = [], [], []
        for k in range(len(self.sent)):
            a, b, outside = self.first_token_window(k, lead)
            rows.append(self.totals(a, b, max(self.chunks[k], self.most_tokens(a, b)),
                                    outside))
            ys.append(b - a)
            kinds.append("ttft")
            if self.last[k] > self.first[k]:
                rows.append(self.totals(self.first[k], self.last[k], self.decoded[k]))
                ys.append(self.last[k] - self.first[k])
                kinds.append("decode")
        y = np.asarray(ys, dtype=np.float64)
        keep = y > 0
        x = np.asarray(rows, dtype=np.float64).reshape(len(ys), len(TERMS))
        return Windows(x[keep], y[keep], [k for k, g in zip(kinds, keep, strict=True) if g],
                       [self.name] * int(keep.sum()))

    def first_token_window(self, k: int, lead: float) -> tuple[float, float, float]:
        """(start, end, 1 if the window holds the request's time outside the steps): a
        request reaching the engine during a step waits for its end, so the window starts
        at the next step end seen before its first token's step; if none is seen, when it
        was sent."""
        b = self.first[k]
        at = self.sent[k] + lead
        nxt = self.ends[min(np.searchsorted(self.ends, at, "right"), len(self.ends) - 1)]
        return (nxt, b, 0.0) if at < nxt < b else (self.sent[k], b, 1.0)

    def most_tokens(self, a: float, b: float) -> float:
        """The most tokens one request decoded in (a, b]: every step gives each decoding
        request one, so the window held at least that many steps."""
        lo, hi = np.searchsorted(self.ev_t, a, "right"), np.searchsorted(self.ev_t, b, "right")
        return float(np.bincount(self.ev_r[lo:hi].astype(np.int64), self.ev_n[lo:hi]).max()) \
            if hi > lo else 0.0

    def totals(self, a: float, b: float, steps: float, request: float = 0.0) -> list[float]:
        """The terms summed over the steps that ended in (a, b]."""
        lo, hi = np.searchsorted(self.ev_t, a, "right"), np.searchsorted(self.ev_t, b, "right")
        d, dc = self.cum_n[hi] - self.cum_n[lo], self.cum_nc[hi] - self.cum_nc[lo]
        plo, phi = np.searchsorted(self.pre_t, a, "right"), \
            np.searchsorted(self.pre_t, b, "right")
        p, at, kv = self.cum_pre[phi] - self.cum_pre[plo]
        return [steps, p, d, at + dc, kv + dc, request]


def _same_step(gaps: list[Matrix]) -> float:
    """Seconds within which token events are ends of one step: SAME_STEP_S, or more when
    the run's requests never get two tokens that close (``gaps``: each request's)."""
    pooled = np.concatenate(gaps) if gaps else np.zeros(0)
    pooled = pooled[pooled > 0]
    if len(pooled) == 0:
        return SAME_STEP_S
    return max(SAME_STEP_S, SAME_STEP_SHARE * float(np.quantile(pooled, 0.05)))


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
    """Fit the step model to one or more finished runs against the same engine (a run
    of the grid's save probe gives the save cost instead)."""
    if not run_dirs:
        raise InputError("name at least one run folder to fit on")
    probes = [rd for rd in run_dirs if is_save_probe(rd)]
    steps = [rd for rd in run_dirs if rd not in probes]
    if not steps:
        raise InputError("name a run to fit on besides the grid's save probe")
    timelines, facts = zip(*(run_timeline(rd, budget) for rd in steps), strict=True)
    lead = 0.0
    for _ in range(2):  # the second pass starts the windows where requests reach the engine
        w = Windows.join([t.windows(lead) for t in timelines])
        if len(w.y) < 2 * len(TERMS):
            raise InputError(f"{len(w.y)} windows in the runs: a fit of {len(TERMS)} terms "
                             f"needs at least {2 * len(TERMS)}")
        coef, pred = nnls_fit(w)
        lead = float(coef[-1])
    if not np.all(np.isfinite(coef)) or not np.any(coef > 0):
        raise InputError("the fit found no positive step time: the runs hold too few "
                         "distinct windows")
    merged = merge_facts(facts)
    fitted = dict(zip(TERMS, map(float, coef), strict=True))
    save, save_error = None, None
    if probes:  # a failed probe leaves the saves unpriced; the step fit stands
        try:
            save = save_cost(probes, fitted)
        except InputError as e:
            save_error = e.one_line()
    # the windows add up the work of every request in flight as one engine's steps: over
    # N engines working side by side, each step seems to do N times the work
    warnings = [f"{Path(rd).name}: its requests went to {f.engines} engines (its endpoints "
                "and simulated instances), which the fit takes as one engine's steps: its "
                "step times come out too short; fit on runs against one engine"
                for rd, f in zip(steps, facts, strict=True) if f.engines > 1]
    return FitResult(coef=fitted,
                     residuals=residuals(w, pred), observations=len(w.y),
                     inputs=[str(Path(r)) for r in run_dirs], facts=merged, windows=w,
                     save=save, save_error=save_error, warnings=warnings)


def merge_facts(facts: Sequence[EngineFacts]) -> EngineFacts:
    """What several runs against one engine say of it: the first run's facts, gaps filled
    by the others'; the longest prompt of all, the lowest long-prompt token ratio, and the
    smallest of differing context windows (runs against differently started engines)."""
    merged = facts[0]
    merged.longest_prompt = max(f.longest_prompt for f in facts)
    merged.long_prompt_ratio = min((f.long_prompt_ratio for f in facts
                                    if f.long_prompt_ratio is not None), default=None)
    windows = sorted({w for f in facts if (w := f.max_context_tokens) is not None})
    if len(windows) > 1:  # runs against differently started engines: the smallest holds
        merged.max_context_tokens = windows[0]
        merged.sources["max_context_tokens"] = (
            f"the smallest of the runs' windows ({', '.join(f'{w:,}' for w in windows)})")
    for f in facts[1:]:  # the first run's facts, gaps filled by the others'
        for k in ("kv_capacity_tokens", "block_size", "max_num_seqs",
                  "max_num_batched_tokens", "max_context_tokens", "ram_cache_tokens",
                  "engine_version"):
            if getattr(merged, k) is None and getattr(f, k) is not None:
                setattr(merged, k, getattr(f, k))
                merged.sources[k] = f.sources.get(k, "")
    return merged


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
    if abs(fit.facts.token_ratio - 1) >= 0.01:
        lines.append(f"  tokens: the engine counted {fit.facts.token_ratio:.3f} per token of "
                     "agentbench's count; coefficients are per agentbench token")
    lines.append("  residuals (|predicted / measured - 1| on the fitted windows): "
                 + ", ".join(f"{k} {v:.1%}" for k, v in fit.residuals.items()))
    if fit.save is not None:
        sv = fit.save
        lines.append(f"  save probe: {sv.s_per_token:.3g} s per token saved to the engine's "
                     f"host-RAM cache (median of {len(sv.rounds)} rounds, "
                     f"{min(sv.rounds):.3g}-{max(sv.rounds):.3g}; ~{sv.tokens:,.0f} tokens "
                     "each)")
    if not math.isfinite(sum(fit.coef.values())):
        lines.append("  warning: a coefficient is not finite")
    lines += [f"  warning: {w}" for w in fit.warnings]
    return "\n".join(lines)
