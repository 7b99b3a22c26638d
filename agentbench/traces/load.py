"""The trace a scenario asks for: read or synthesized, transformed, filtered."""

from __future__ import annotations

import random
from typing import Any

from agentbench.errors import InputError
from agentbench.traces import transform
from agentbench.traces.model import Session, Trace


def load_scenario_trace(spec: Any, seed: int) -> Trace:
    """Build the trace of ``scenario.trace`` (a TraceSource or SynthSource). With
    ``trace.skip_bad``, the bad files of a folder are left out and listed in the trace's
    ``skipped``."""
    if spec.kind == "synth":
        from agentbench.traces.synth import synthesize

        trace = synthesize(spec.profile, sessions=spec.sessions,
                           seed=seed if spec.seed is None else spec.seed)
    else:
        from agentbench.traces.readers import read_trace

        if "skip_bad" in spec.options:
            raise InputError("set trace.skip_bad, not a reader option",
                             field="trace.options.skip_bad")
        trace = read_trace(spec.source, format=spec.format, skip_bad=spec.skip_bad,
                           sessions=spec.filters.sessions, **spec.options)
    tf = spec.transform
    if tf.max_context_tokens is not None:
        trace = transform.truncate(trace, tf.max_context_tokens)
    if tf.scale is not None:
        trace = transform.scale(trace, tf.scale)
    return apply_filters(trace, spec.filters, seed)


def apply_filters(trace: Trace, filters: Any, seed: int) -> Trace:
    """Keep the session trees that pass ``filters`` (a TraceFilters), in order (shuffled
    with ``seed`` when asked), at most ``max_sessions`` of them."""
    trees = trace.trees()
    before = len(trees)
    if filters.sessions is not None:
        wanted = set(filters.sessions)
        trees = [t for t in trees if t[0].session_id in wanted]
        found = {t[0].session_id for t in trees}
        missing = [s for s in filters.sessions if s not in found]
        if missing:
            known = ", ".join(t[0].session_id for t in trace.trees()[:3])
            raise InputError(f"{len(missing)} of {len(wanted)} sessions are not root sessions "
                             f"of the trace ({', '.join(missing[:3])}"
                             f"{', ...' if len(missing) > 3 else ''}); its roots look like "
                             f"{known or 'nothing (the trace is empty)'}",
                             field="trace.filters.sessions")
    if filters.min_turns is not None:
        trees = [t for t in trees if len(t[0].turns) >= filters.min_turns]
    if filters.max_input_tokens is not None:
        cap = filters.max_input_tokens
        trees = [t for t in trees if all(turn.input_tokens <= cap for s in t for turn in s.turns)]
    if getattr(filters, "max_context_tokens", None) is not None:
        window = filters.max_context_tokens  # the server's context: prompt + output must fit
        trees = [t for t in trees if all(turn.input_tokens + turn.output_tokens <= window
                                         for s in t for turn in s.turns)]
    if filters.with_subagents is not None:
        trees = [t for t in trees if (len(t) > 1) == filters.with_subagents]
    if filters.shuffle:
        random.Random(seed).shuffle(trees)
    if filters.max_sessions is not None:
        trees = trees[: filters.max_sessions]
    if not trees:
        raise InputError(f"no session tree of the {before} in the trace passes the filters "
                         f"({_describe(filters)})", field="trace.filters")
    sessions: list[Session] = [s for tree in trees for s in tree]
    return Trace(sessions, name=trace.name, skipped=trace.skipped)


def _describe(filters: Any) -> str:
    return ", ".join(f"{k}: {v}" for k, v in filters.model_dump().items()
                     if v is not None and v is not False) or "none"
