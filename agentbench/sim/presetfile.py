"""Preset files: a simulator preset as YAML, every figure with its source, validated.

The shipped presets are such files (``preset_files/``); a scenario's simulated endpoint may
name one of its own (``preset: my-gpu.yaml``), and a preset fitted to a real engine's runs
is written as one (``preset_yaml``). The format is described in docs/engines.md,
"Simulator presets". Whatever the file holds, a problem is one ``InputError`` line naming
the file, the line and the key.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentbench.errors import InputError
from agentbench.scenario.strict import one_printable_line
from agentbench.scenario.yamlfile import (
    MAX_SHOWN,
    key_lines,
    one_line,
    read_small_text,
    read_yaml,
)
from agentbench.sim.cost import STEP_FIT_TERMS, StepFit
from agentbench.sim.presets import FIGURES, ROOFLINE_ONLY, Preset, Provenance

#: bytes at most in a preset file (a real one is a few KB)
MAX_PRESET_BYTES = 1 << 20


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _printable(cls, v: Any) -> Any:
        """Every text of a preset file is printed (``sim check``, ``serve-sim
        --list-presets``): one printable line each (an escape sequence in its model name
        retitled and cleared the terminal)."""
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, str):
                one_printable_line(x)
        return v


class _Figure(_Model):
    source: str = Field(min_length=1, description="Where the value comes from: a spec "
                        "sheet or document (title or URL), 'assumption: why', or 'fitted "
                        "from RUNS'.")


class _Positive(_Figure):
    value: float = Field(gt=0, description="A finite number above 0.")


class _Rate(_Figure):
    value: float = Field(gt=0, allow_inf_nan=True, description="A number above 0; .inf: "
                         "unlimited (the steps take no time on this account).")


class _Bytes(_Figure):
    value: int | float = Field(gt=0, description="Bytes above 0 (an integer stays one: "
                               "the step times keep exact integer arithmetic).")


class _NonNegative(_Figure):
    value: float = Field(ge=0, description="A finite number, 0 or above.")


class _Fraction(_Figure):
    value: float = Field(gt=0, le=1, description="A fraction in (0, 1].")


class _Count(_Figure):
    value: int = Field(ge=1, le=1 << 40, description="A whole number, 1 or above.")


class _Whole(_Figure):
    value: int = Field(ge=0, le=1 << 40, description="A whole number, 0 or above.")


class _Figures(_Model):
    """The preset's figures (``Preset``'s fields; step times from them: cost.py). The model
    shape and hardware figures are the roofline's: a fitted preset (``step_model``) has
    none of them and says its KV capacity instead."""

    params: _Positive | None = Field(None, description="Model parameters (2 FLOPs each "
                                     "per token).")
    layers: _Count | None = Field(None, description="Transformer layers.")
    hidden: _Count | None = Field(None, description="Attention heads x head dim (attention "
                                  "FLOPs per token pair = 4 x layers x hidden).")
    kv_bytes_per_token: _Bytes | None = Field(None, description="KV cache bytes per token, "
                                              "all layers.")
    weight_bytes: _NonNegative | None = Field(None, description="Weight bytes read once per "
                                              "step.")
    peak_flops: _Rate | None = Field(None, description="Dense FLOP/s of the instance at the "
                                     "serving precision.")
    mfu: _Fraction | None = Field(None, description="Achieved fraction of peak_flops.")
    hbm_bytes_per_s: _Rate | None = Field(None, description="HBM bandwidth, bytes/s.")
    mbu: _Fraction | None = Field(None, description="Achieved fraction of the HBM "
                                  "bandwidth.")
    hbm_bytes: _Positive | None = Field(None, description="HBM capacity, bytes.")
    gpu_memory_utilization: _Fraction | None = Field(
        None, description="Share of HBM the engine uses (vLLM's gpu_memory_utilization).")
    activation_reserve_bytes: _NonNegative | None = Field(
        None, description="HBM kept for activations and CUDA graphs, not for KV.")
    step_overhead_s: _NonNegative | None = Field(None, description="Seconds added to every "
                                                 "step (scheduling, launches).")
    max_num_batched_tokens: _Count = Field(description="Token budget of one step.")
    max_num_seqs: _Count = Field(description="Most requests running at once.")
    cpu_load_s_per_token: _NonNegative = Field(description="Seconds to load one cached "
                                               "token from the CPU offload tier.")
    shared_load_s_per_token: _NonNegative = Field(description="Seconds to load one cached "
                                                  "token from the shared tier.")
    natural_output_tokens: _Count = Field(description="Mean output length when the client "
                                          "does not force one.")
    kv_capacity_tokens: _Count | None = Field(None, description="KV cache capacity in "
                                              "tokens as the engine reports it (instead of "
                                              "the memory figures).")
    expert_weight_bytes: _NonNegative | None = Field(
        None, description="Mixture of experts: bytes of the routed experts (part of "
        "weight_bytes); a step reads only the experts its tokens route to.")
    routed_experts: _Count | None = Field(None, description="Mixture of experts: routed "
                                          "experts per MoE layer.")
    experts_per_token: _Count | None = Field(None, description="Mixture of experts: routed "
                                             "experts each token uses.")
    sequence_kv_bytes: _NonNegative | None = Field(
        None, description="KV bytes a sequence holds whatever its length (sliding-window "
        "layers at their window, linear-attention states); kv_bytes_per_token then counts "
        "the full-attention layers only.")
    max_context_tokens: _Count | None = Field(
        None, description="The context window the engine enforces per request, in the "
        "simulator's tokens (vLLM's --max-model-len; a llama.cpp slot's share of -c): as "
        "the engines do, a prompt that leaves no room for output is refused with HTTP 400 "
        "and a longer output is cut at the window. Absent: only the KV capacity limits a "
        "request.")
    ram_cache_tokens: _Whole | None = Field(
        None, description="A slots (llama.cpp) engine's host-RAM prompt cache in the "
        "simulator's tokens (llama-server's --cache-ram); 0: none (--cache-ram 0). Absent: "
        "llama-server's default, 8 GiB over the KV bytes per token (unbounded for a fitted "
        "preset).")


class _Seconds(_Figure):
    value: float = Field(ge=0, le=1.0, description="Seconds, 0 to 1 (a step model beyond a "
                         "second per unit describes no serving engine, and would stretch a "
                         "simulated run without bound).")


class _RequestSeconds(_Figure):
    value: float = Field(ge=0, le=60.0, description="Seconds, 0 to 60.")


class _FitSummary(_Model):
    """How the step model was fitted and how well it explains what it was fitted on."""

    method: str = Field(min_length=1, description="The fit: estimator and weighting.")
    observations: int = Field(ge=1, description="Observations the fit used.")
    inputs: list[str] = Field(min_length=1, description="Run folders or grids fitted on.")
    residuals: dict[str, float] = Field(description="Relative errors of the fit on its own "
                                        "observations, by kind (median and p90 of "
                                        "|predicted - measured| / measured).")


class _StepModel(_Model):
    """A fitted step-time model (cost.py, ``FittedCost``): seconds per unit of each term."""

    intercept_s: _Seconds = Field(description="Seconds every step costs.")
    prefill_token_s: _Seconds = Field(description="Seconds per new prompt token.")
    decode_token_s: _Seconds = Field(description="Seconds per decoded token (per sequence "
                                     "in the batch).")
    attention_pair_s: _Seconds = Field(description="Seconds per (query, context) token "
                                       "pair of attention.")
    kv_token_s: _Seconds = Field(description="Seconds per token of KV read in a step.")
    request_s: _RequestSeconds | None = Field(None, description="Seconds a request spends before "
                                       "the engine schedules it (HTTP, tokenizing, an API "
                                       "server); absent: none.")
    fit: _FitSummary = Field(description="How it was fitted, and its residuals.")


class _Provenance(_Model):
    """What the figures describe and where they come from."""

    engine: str = Field(min_length=1, description="Serving engine the figures describe or "
                        "were fitted to.")
    engine_version: str | None = Field(None, description="Its version; null: none (an "
                                       "analytic preset).")
    model: str = Field(min_length=1, description="Model, with its precision.")
    hardware: str = Field(min_length=1, description="GPU(s) of one instance.")
    gpus: int | None = Field(None, ge=0, le=4096, description="How many GPUs one instance "
                             "runs on (0: none, a CPU engine); null: not said. A run's "
                             "hardware.gpus is checked against instances x this.")
    date: dt.date = Field(strict=False, description="When the figures were set or fitted "
                          "(YYYY-MM-DD).")
    sources: list[str] = Field(min_length=1, description="Spec sheets, documents (title or "
                               "URL) and run folders the figures come from.")
    notes: list[str] = Field([], description="Calibration, assumptions and limits, one line "
                             "each (printed by `serve-sim --list-presets`).")


class PresetFile(_Model):
    """One simulator preset file."""

    format: Literal[1] = Field(1, description="Version of this file format.")
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$",
                      description="Preset name (shown in /v1/models and results).")
    summary: str = Field(min_length=1, description="One line: hardware, model, engine.")
    provenance: _Provenance = Field(description="Where the figures come from.")
    scheduler: Literal["paged", "slots"] = Field("paged", description="How an instance "
                                                 "schedules: paged (vLLM-style blocks, "
                                                 "prefix cache, chunked prefill) or slots "
                                                 "(llama.cpp-style, one prompt cache per "
                                                 "slot).")
    figures: _Figures = Field(description="The figures, each a value and its source.")
    step_model: _StepModel | None = Field(None, description="A fitted step-time model; "
                                          "absent: the roofline of the figures.")

    def problem(self) -> tuple[str, str] | None:
        """(key, why) where the figures do not suit the step model, or None."""
        fitted = self.step_model is not None
        for k in ROOFLINE_ONLY:
            given = getattr(self.figures, k) is not None
            if fitted and given:
                return f"figures.{k}", "not read by a fitted preset (step_model): remove it"
            if not fitted and not given:
                return f"figures.{k}", "missing (a preset without step_model needs it)"
        moe = ("expert_weight_bytes", "routed_experts", "experts_per_token")
        given_moe = [k for k in moe if getattr(self.figures, k) is not None]
        for k in (*moe, "sequence_kv_bytes"):
            if fitted and getattr(self.figures, k) is not None:
                return f"figures.{k}", "not read by a fitted preset (step_model): remove it"
        if given_moe and len(given_moe) < len(moe):
            missing = next(k for k in moe if k not in given_moe)
            return f"figures.{missing}", "missing (a mixture of experts gives " \
                "expert_weight_bytes, routed_experts and experts_per_token)"
        f = self.figures
        if given_moe and f.experts_per_token.value > f.routed_experts.value:  # type: ignore[union-attr]
            return "figures.experts_per_token", "more than routed_experts"
        if given_moe and f.weight_bytes is not None \
                and f.expert_weight_bytes.value > f.weight_bytes.value:  # type: ignore[union-attr]
            return "figures.expert_weight_bytes", "more than weight_bytes (it is a part of it)"
        seq = f.sequence_kv_bytes
        hbm, util, wb, act = (f.hbm_bytes, f.gpu_memory_utilization, f.weight_bytes,
                              f.activation_reserve_bytes)
        if seq is not None and hbm is not None and util is not None and wb is not None \
                and act is not None:
            free = hbm.value * util.value - wb.value - act.value
            if seq.value >= free:
                return "figures.sequence_kv_bytes", f"{seq.value:,.0f} bytes a sequence: " \
                    f"not less than the whole KV cache ({free:,.0f} bytes)"
        if fitted and self.figures.kv_capacity_tokens is None:
            return "figures.kv_capacity_tokens", "missing (a fitted preset says its KV " \
                "capacity)"
        return None

    def preset(self) -> Preset:
        figs = {k: f for k in FIGURES if (f := getattr(self.figures, k)) is not None}
        sm = self.step_model
        sources = [(k, f.source) for k, f in figs.items()]
        if sm is not None:
            sources += [(k, f.source) for k in STEP_FIT_TERMS
                        if (f := getattr(sm, k)) is not None]
        p = self.provenance
        prov = Provenance(engine=p.engine, engine_version=p.engine_version, model=p.model,
                          hardware=p.hardware, date=p.date.isoformat(),
                          sources=tuple(p.sources), notes=tuple(p.notes),
                          figures=tuple(sources))
        values: dict[str, Any] = {k: 0 for k in ROOFLINE_ONLY}  # a fitted preset: unread
        values.update((k, f.value) for k, f in figs.items())
        fit = None if sm is None else StepFit(**{k: f.value for k in STEP_FIT_TERMS
                                                 if (f := getattr(sm, k)) is not None})
        return Preset(name=self.name, summary=self.summary, provenance=prov,
                      scheduler=self.scheduler, step_fit=fit, gpus=p.gpus,
                      fit_summary=None if sm is None else sm.fit.model_dump(), **values)


def load_preset_file(path: str | Path) -> Preset:
    """The preset in the YAML file at ``path``; an ``InputError`` (one line naming the file,
    line and key) for a file that cannot be read or does not hold a valid preset."""
    p = Path(path)
    text = read_small_text(p, "preset file", MAX_PRESET_BYTES)
    return parse_preset(text, str(p))


def parse_preset(text: str, source: str = "<preset>") -> Preset:
    """The preset in YAML ``text``; ``source`` names it in errors."""
    data, root = read_yaml(text, source)  # a ScenarioError (an InputError) for bad YAML
    if not isinstance(data, dict):
        raise InputError("a preset file is a YAML mapping (name, summary, provenance, "
                         "figures)", source=source)
    try:
        model = PresetFile.model_validate(data)
    except ValidationError as e:
        errs = e.errors()
        key, msg = _problem(errs[0], data)
        more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
        raise _at(key, one_line(msg) + more, root, source) from None
    bad = model.problem()
    if bad is not None:
        raise _at(bad[0], bad[1], root, source)
    return model.preset()


def _at(key: str, msg: str, root: Any, source: str) -> InputError:
    """``msg`` about ``key`` (a dotted path) as one InputError naming its line."""
    lines, parts = key_lines(root), key.split(".")
    line = next((ln for n in range(len(parts), 0, -1)  # a missing key: its parent's
                 if (ln := lines.get(tuple(parts[:n])))), None)
    return InputError(msg, source=source, where=f"line {line}" if line else None,
                      field=one_line(key))


def _problem(err: Any, data: Any) -> tuple[str, str]:
    """(key path as the file spells it, message) of one pydantic error."""
    path: list[str] = []
    node = data
    loc = tuple(err["loc"])
    for i, part in enumerate(loc):  # union members' names ('int', 'float') are not keys
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif not (err["type"] == "missing" and i == len(loc) - 1):
            continue
        path.append(str(part))
    got = err.get("input")
    kind = err["type"]
    if kind == "extra_forbidden":
        msg = "unknown key (typo?)"
    elif kind == "missing":
        msg = "missing"
    elif isinstance(got, float) and math.isnan(got):
        msg = "must be a number, not NaN"
    elif kind in ("float_type", "int_type") and isinstance(got, str):
        msg = (f"must be a number, not the string {got!r} (YAML reads 1e3 as a string, "
               "1.0e+3 as a number)")
    elif kind in ("model_type", "model_attributes_type"):
        msg = f"must be a mapping (value:, source:), not {type(got).__name__}"
    else:
        msg = f"{err['msg'].removeprefix('Value error, ')} (got {one_line(repr(got), 60)})"
    return ".".join(path) or "(root)", msg[:MAX_SHOWN]


def preset_yaml(preset: Preset) -> str:
    """``preset`` as a preset file's YAML (``load_preset_file`` reads it back equal)."""
    import yaml

    prov = preset.provenance
    given = dict(prov.figures)
    data: dict[str, Any] = {
        "format": 1, "name": preset.name, "summary": preset.summary,
        "provenance": {"engine": prov.engine, "engine_version": prov.engine_version,
                       "model": prov.model, "hardware": prov.hardware,
                       **({} if preset.gpus is None else {"gpus": preset.gpus}),
                       "date": prov.date,
                       "sources": list(prov.sources), "notes": list(prov.notes)},
    }
    if preset.scheduler != "paged":
        data["scheduler"] = preset.scheduler
    data["figures"] = {k: {"value": getattr(preset, k), "source": given[k]}
                       for k in FIGURES if k in given}
    fit = preset.step_fit
    if fit is not None:
        data["step_model"] = {k: {"value": getattr(fit, k), "source": given.get(k, "fitted")}
                              for k in STEP_FIT_TERMS if k != "request_s" or k in given}
        data["step_model"]["fit"] = dict(preset.fit_summary or {})
    head = "# agentbench simulator preset (format: docs/engines.md, \"Simulator presets\")\n"
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=96)
