"""The scenario's trace: where the workload comes from (a trace file, folder or dataset, or
a profile that synthesizes one at run time), which of its sessions are replayed and how
they are fitted to a small model. Part of the validated scenario
(:mod:`agentbench.scenario.model`, which re-exports these names)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from agentbench.scenario.strict import Strict, json_only
from agentbench.traces import MAX_SYNTH_SESSIONS, MIN_SCALE, NOT_READER_OPTIONS


class TraceFilters(Strict):
    """Which sessions of the source to replay."""

    max_sessions: int | None = Field(None, gt=0, description="Keep the first N root trees.")
    sessions: list[str] | None = Field(None, description="Keep only these root session ids.")
    min_turns: int | None = Field(None, ge=0, description="Drop roots with fewer turns.")
    max_input_tokens: int | None = Field(
        None, gt=0, description="Drop trees with any turn above this many input tokens.")
    with_subagents: bool | None = Field(
        None, description="True: only trees with subagents; False: only without.")
    max_context_tokens: int | None = Field(
        None, gt=0, description="Drop trees with any turn whose input plus output tokens "
        "exceed this (the server's context window), so none overflows mid-run.")
    shuffle: bool = Field(False, description="Shuffle root order with the run seed.")


class TraceTransform(Strict):
    """Fit a trace to a small model while keeping its prefix structure."""

    max_context_tokens: int | None = Field(
        None, gt=0, description="Cap every prompt at its first N tokens (applied first).")
    scale: float | None = Field(
        None, ge=MIN_SCALE, le=1, description="Multiply input/output lengths and block size by "
        "this (0.001-1: below that, prompts shrink to nothing).")


class TraceSource(Strict):
    """Where the trace comes from and how to read it."""

    kind: Literal["file"] = Field("file", description="A file, folder or dataset id.")
    source: str = Field(min_length=1, description="Path (relative to the scenario file), "
                        "HF dataset id, "
                        "builtin:NAME (a bundled trace) or cache:NAME (one `agentbench "
                        "traces fetch` got).")
    format: str | None = Field(None, description="Reader to use; None: detect from content.")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="Reader options (tokenizer, seed...).")

    @field_validator("options")
    @classmethod
    def _options(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, where in NOT_READER_OPTIONS.items():
            if key in v:
                raise ValueError(f"{key!r} is not a reader option: set {where}")
        return json_only(v)
    skip_bad: bool = Field(False, description="For a folder source: skip its bad files "
                           "(counted and named in the trace's `skipped`) instead of "
                           "stopping at them.")
    filters: TraceFilters = Field(default_factory=TraceFilters,
                                  description="Session selection.")
    transform: TraceTransform = Field(default_factory=TraceTransform,
                                      description="Scaling / truncation for small models.")


class SynthSource(Strict):
    """A synthetic trace made at run time by a calibrated profile."""

    kind: Literal["synth"] = Field(description="Generate the trace from a profile.")
    profile: str = Field(description="Synthesis profile, e.g. agentx or codex.")
    sessions: int = Field(gt=0, le=MAX_SYNTH_SESSIONS, description="Root sessions to generate.")
    seed: int | None = Field(None, ge=0, description="Generator seed; None: the run seed.")
    filters: TraceFilters = Field(default_factory=TraceFilters,
                                  description="Session selection.")
    transform: TraceTransform = Field(default_factory=TraceTransform,
                                      description="Scaling / truncation for small models.")


TraceSpec = Annotated[TraceSource | SynthSource, Field(discriminator="kind")]
