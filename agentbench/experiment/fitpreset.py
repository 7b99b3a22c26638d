"""A fitted simulator preset (``agentbench sim fit``, docs/simulator.md): the step model a
fit found (``simfit``), with the engine's capacity and limits (the KV capacity, slots, step
budget and context window, as ``sim fit``'s options give them or the runs say, converted
to the simulator's tokens) and provenance naming the runs and the fit's residuals."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agentbench.errors import InputError
from agentbench.experiment.enginefacts import EngineFacts
from agentbench.experiment.simfit import TERMS, FitResult
from agentbench.sim.cost import StepFit

#: a save probe's median round delayed its request by more than this: the engine saves
#: (vLLM measured under 0.1 ms a round, llama-server 150-250 ms; 2026-12-05)
SAVE_SEEN_S = 0.005


def fitted_preset(fit: FitResult, *, name: str, engine: str | None = None,
                  engine_version: str | None = None, model: str = "unknown model",
                  hardware: str = "unknown hardware", scheduler: str | None = None,
                  kv_capacity_tokens: int | None = None, max_num_seqs: int | None = None,
                  max_num_batched_tokens: int | None = None,
                  max_context_tokens: int | None = None,
                  natural_output_tokens: int = 256) -> Any:
    """The ``Preset`` of a fit: its coefficients, the engine's capacity and limits (given
    here, else from the runs), provenance naming the runs and the residuals."""
    from agentbench.sim.presets import ROOFLINE_ONLY, Preset, Provenance

    f = fit.facts
    family = f.family
    vals, src = _limits(f, {"kv_capacity_tokens": kv_capacity_tokens,
                            "max_num_seqs": max_num_seqs,
                            "max_num_batched_tokens": max_num_batched_tokens})
    window, src["max_context_tokens"] = _window(f, max_context_tokens)
    llama = family == "llama.cpp" or "llama" in (engine or "").lower().replace("-", ".")
    sched = scheduler or ("slots" if llama else "paged")
    fitted = f"fitted by sim fit on {len(fit.inputs)} run(s), {fit.observations} windows"
    copy_s, copy_src = _copy_cost(fit, sched)
    figures = [("max_num_batched_tokens", src["max_num_batched_tokens"]),
               ("max_num_seqs", src["max_num_seqs"]),
               ("cpu_load_s_per_token", copy_src),
               ("shared_load_s_per_token", "assumption: no shared tier"),
               ("natural_output_tokens", "assumption: mean output when not forced"),
               ("kv_capacity_tokens", src["kv_capacity_tokens"])]
    if window is not None:
        figures.append(("max_context_tokens", src["max_context_tokens"]))
    ram = f.ram_cache_tokens if sched == "slots" else None
    if ram is not None:
        figures.append(("ram_cache_tokens", f.sources.get("ram_cache_tokens", "the runs")))
    figures += [(k, fitted) for k in TERMS]
    notes = ["residuals on the fitted windows (|predicted / measured - 1|): "
             + ", ".join(f"{k} {v:.3f}" for k, v in fit.residuals.items())]
    ratio = f.token_ratio
    if abs(ratio - 1) >= 0.01:
        notes.append(f"token counts: the engine's tokenizer counted {ratio:.3f} tokens per "
                     "token of agentbench's count of the same text; the coefficients, "
                     "capacity and step budget are per agentbench token, as the simulator "
                     "counts")
    if (warn := save_warning(fit, sched)) is not None:
        notes.append(f"warning: {warn}")
    if f.block_size:
        notes.append(f"the engine's KV block size: {f.block_size} "
                     f"({f.sources.get('block_size', 'the runs')})")
    prov = Provenance(engine=engine or family,
                      engine_version=engine_version or f.engine_version, model=model,
                      hardware=hardware, date=dt.date.today().isoformat(),
                      sources=tuple(fit.inputs), notes=tuple(notes), figures=tuple(figures))
    zero = {k: 0 for k in ROOFLINE_ONLY}  # a fitted preset: unread, as a preset file's
    c = fit.coef
    return Preset(name=name, summary=f"{engine or family} fitted to {len(fit.inputs)} run(s)",
                  provenance=prov, cpu_load_s_per_token=copy_s, shared_load_s_per_token=0.0,
                  natural_output_tokens=natural_output_tokens,
                  kv_capacity_tokens=vals["kv_capacity_tokens"],
                  max_num_seqs=vals["max_num_seqs"],
                  max_num_batched_tokens=vals["max_num_batched_tokens"],
                  max_context_tokens=window, ram_cache_tokens=ram,
                  step_fit=StepFit(**c), scheduler=sched,
                  fit_summary={"method": "non-negative least squares on request windows, "
                               "rows weighted 1/measured (agentbench sim fit)",
                               "observations": fit.observations, "inputs": fit.inputs,
                               "residuals": fit.residuals},
                  **zero)


def save_warning(fit: FitResult, scheduler: str) -> str | None:
    """What a user should know about the save probe for a preset of ``scheduler``: that it
    failed, or that it measured saves (a llama.cpp-style engine) a paged preset ignores."""
    sv = fit.save
    if fit.save_error is not None:
        return f"{fit.save_error}: saves to a host-RAM cache are priced at 0"
    if sv is not None and scheduler != "slots" and sv.s_per_token * sv.tokens > SAVE_SEEN_S:
        return (f"the save probe measured {sv.s_per_token:.3g} s per token saved: the "
                "engine stops to save idle slots, as llama-server does, but the preset is "
                "paged and ignores that; pass --engine llama.cpp or --scheduler slots")
    return None


def _copy_cost(fit: FitResult, scheduler: str) -> tuple[float, str]:
    """``cpu_load_s_per_token`` and its source: for a llama.cpp-style engine, what the
    grid's save probe measured a token saved to the host-RAM cache costs (the slots model
    prices its saves and restores with it); otherwise no CPU tier is assumed."""
    sv = fit.save
    if scheduler != "slots":
        return 0.0, "assumption: no CPU offload tier"
    if sv is None:
        why = (f"the save probe failed: {fit.save_error}" if fit.save_error is not None
               else "no save probe among the runs: fit with the grid, sim fit --endpoint")
        return 0.0, f"assumption: saves to the host-RAM prompt cache cost nothing ({why})"
    return sv.s_per_token, (f"measured: the grid's save probe, median of {len(sv.rounds)} "
                            f"saves of ~{sv.tokens:,.0f} tokens ({min(sv.rounds):.3g}-"
                            f"{max(sv.rounds):.3g} s per token)")


def _limits(f: EngineFacts, given: dict[str, int | None]) -> tuple[dict[str, int],
                                                                    dict[str, str]]:
    """The engine's capacity and limits, each ``given`` (sim fit's options) else as the
    runs say, in the simulator's tokens, with their sources; the step budget and slots
    default."""
    vals: dict[str, int] = {}
    src: dict[str, str] = {}
    defaults = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
    ratio = f.token_ratio
    per = "" if abs(ratio - 1) < 0.01 else \
        f", / {ratio:.3f} engine tokens per simulator token"
    for k, v in given.items():
        tokens = k != "max_num_seqs"  # counted in the engine's tokens: converted
        if v is not None:
            vals[k], src[k] = v, "set by sim fit's option"
        elif getattr(f, k) is not None:
            vals[k], src[k] = getattr(f, k), f.sources.get(k, "the runs")
        else:
            vals[k] = 0
        if tokens and vals[k] and per:
            vals[k] = max(1, round(vals[k] / ratio))
            src[k] += per
        if vals[k]:
            continue
        if k in defaults:
            vals[k], src[k] = defaults[k], f"assumption: not stated by the runs ({f.family})"
        else:
            raise InputError("the runs do not say the engine's KV capacity: pass "
                             "--kv-capacity-tokens", field="--kv-capacity-tokens")
    if vals["kv_capacity_tokens"] < f.longest_prompt:
        raise InputError(f"{vals['kv_capacity_tokens']:,} tokens of KV (agentbench's count) "
                         f"cannot hold the longest prompt fitted on ({f.longest_prompt:,.0f}): "
                         "every request would be refused; --kv-capacity-tokens is in the "
                         "engine's tokens", field="kv_capacity_tokens")
    return vals, src


def _window(f: EngineFacts, given: int | None) -> tuple[int | None, str]:
    """The engine's context window in the simulator's tokens (``given``: sim fit's option,
    else as the runs say; None: no window), converted at the longest prompts' token ratio
    so that no prompt the engine served is refused, and its source."""
    window = given or f.max_context_tokens
    if window is None:
        return None, ""
    src = "set by sim fit's option" if given else f.sources.get("max_context_tokens",
                                                                "the runs")
    r = f.long_prompt_ratio or f.token_ratio
    if abs(r - 1) >= 0.01:
        window = max(1, round(window / r))
        src += f", / {r:.3f} engine tokens per simulator token (the longest prompts' lowest)"
    if window < f.longest_prompt:
        raise InputError(f"a context window of {window:,} tokens (agentbench's count) is "
                         f"shorter than the longest prompt fitted on ({f.longest_prompt:,.0f}"
                         "), which the engine served; --max-context-tokens is in the "
                         "engine's tokens", field="max_context_tokens")
    return window, src
