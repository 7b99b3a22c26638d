"""The validity verdict of a run under benchmark rules (``rules: agentx``) and the AgentX
headline per concurrency point, from the records and run.json alone.

A run is invalid when (AIPerf's inferencex-agentx-mvp rules, docs/agentx.md):

- ``unsafe_override``: it ran with settings that contradict the rules;
- ``context_overflow_rate_exceeded``: in some stage, context overflows / measured requests
  > the limit (1%);
- ``run_cancelled``: it did not complete (interrupted, crashed, killed);
- ``gpu_count_mismatch``: ``hardware.gpus`` differs from the GPUs its simulated endpoints
  model (instances x the preset's GPUs per instance);
- ``observations_stopped_early``: in some stage, the last TTFT/ITL observation (a
  successful measured request's last token) came before ``observed_share`` (95%) of the
  profiling phase (from the moment every lane is warm, for duration_s)."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentbench.metrics.derive import Derived
from agentbench.metrics.load import low_load

NS = 1_000_000_000


def last_observation_ns(d: Derived, stage: str) -> float | None:
    """The latest token time of the stage's successful measured requests, ns; None when
    there is none."""
    if stage not in d.stages:
        return None
    rows = d.measured & d.ok & (d.stage_code == d.stages.index(stage))
    if not rows.any():
        return None
    last = d.df["last_token_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[rows]
    first = d.df["first_token_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[rows]
    t = np.fmax(last, first)
    return None if np.all(np.isnan(t)) else float(np.nanmax(t))


def validity(run: dict[str, Any], stages: dict[str, dict[str, Any]], d: Derived
             ) -> dict[str, Any] | None:
    """``{rules, valid, reasons, details}`` for a run under rules; None without rules."""
    rules = run.get("rules")
    if not isinstance(rules, dict):
        return None
    reasons: list[str] = []
    details: list[str] = []

    def fail(reason: str, detail: str) -> None:
        if reason not in reasons:
            reasons.append(reason)
        details.append(f"{reason}: {detail}")

    for line in rules.get("overrides") or []:
        fail("unsafe_override", line)
    limit = float(rules.get("overflow_rate_limit", 0.01))
    for label, b in stages.items():
        r = b["requests"]
        rate = r.get("context_overflow_rate")
        if rate is not None and rate > limit:
            fail("context_overflow_rate_exceeded",
                 f"stage {label}: {r['context_overflow']:,} of {r['total']:,} measured "
                 f"requests overflowed the context ({rate:.2%} > {limit:.0%})")
    status = run.get("status")
    if status != "completed":
        fail("run_cancelled", f"the run ended {status or 'without a status (cut short)'}")
    share = float(rules.get("observed_share", 0.95))
    limits = (run.get("scenario") or {}).get("limits") or {}
    duration_s = limits.get("duration_s")
    if duration_s:
        for st in run.get("stages") or []:
            # the profiling phase starts once every lane is warm (older runs: the stage)
            t0 = st.get("profile_start_ns", st["start_ns"])
            need = t0 + share * duration_s * NS
            last = last_observation_ns(d, st["label"])
            if last is None or last < need:
                seen = ("none" if last is None
                        else f"the last at {(last - t0) / NS:,.1f} s")
                fail("observations_stopped_early",
                     f"stage {st['label']}: TTFT/ITL observations stop before "
                     f"{share:.0%} of the {duration_s:g} s profiling phase ({seen})")
    why = gpu_mismatch(run)
    if why is not None:
        fail("gpu_count_mismatch", why)
    details += [f"warning: {line}" for line in low_load(stages)]  # not a reason
    return {"rules": rules.get("name"), "valid": not reasons, "reasons": reasons,
            "details": details}


def modeled_gpus(run: dict[str, Any]) -> int | None:
    """The GPUs the run's simulated endpoints model (run.json ``endpoints[].modeled_gpus``,
    summed); None when an endpoint is real or does not say."""
    eps = run.get("endpoints")
    if not isinstance(eps, list) or not eps:
        return None
    counts: list[int] = []
    for e in eps:
        c = e.get("modeled_gpus") if isinstance(e, dict) else None
        if not isinstance(c, int) or isinstance(c, bool):
            return None
        counts.append(c)
    return sum(counts)


def gpu_mismatch(run: dict[str, Any]) -> str | None:
    """Why the scenario's ``hardware.gpus`` is not what its simulated endpoints model (the
    per-GPU figures and the self-hosted cost rest on it), or None (equal, or unknown: a
    real endpoint, a preset that does not say, or one that models no GPU)."""
    modeled = modeled_gpus(run)
    hw = ((run.get("scenario") or {}).get("hardware") or {})
    gpus = hw.get("gpus", 1.0)
    if not modeled or not isinstance(gpus, int | float) or gpus == modeled:
        return None
    return (f"hardware.gpus is {gpus:g} but the simulated endpoints model {modeled} GPUs: "
            f"per-GPU throughput and cost are off by {modeled / gpus:.3g}x")


def agentx_headline(stages: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The AgentX figures of each concurrency point (sweep stage): total tokens/s per GPU,
    interactivity (output tokens/s per user = 1/TPOT, p50), TTFT and E2E p50/p90, the
    theoretical (trace potential) against the actual (server usage, else Prometheus) hit
    rate, and the self-hosted cost against the API price for the same tokens."""
    rows = []
    for label, b in stages.items():
        lat, h, c = b["latency"], b["hit_rate"], b["cost"]
        actual = h["usage"]["value"]
        if actual is None:
            actual = (h.get("prometheus") or {}).get("value")
        rows.append({
            "stage": label,
            "total_tok_s_per_gpu": b["throughput"]["per_gpu_total_tok_s"],
            "interactivity_tok_s_p50": b["interactivity_tok_s"]["p50"],
            "ttft_ms_p50": lat["ttft_ms"]["p50"], "ttft_ms_p90": lat["ttft_ms"]["p90"],
            "e2e_ms_p50": lat["e2e_ms"]["p50"], "e2e_ms_p90": lat["e2e_ms"]["p90"],
            "hit_rate_theoretical": h["potential"]["value"], "hit_rate_actual": actual,
            "self_hosted_usd_per_mtok": c.get("per_mtok_total_usd"),
            "api_usd_per_mtok": c.get("api_per_mtok_usd"),
            "api_over_self_hosted": c.get("api_over_self_hosted"),
            "context_overflow_rate": b["requests"].get("context_overflow_rate"),
        })
    return rows
