"""Benchmark rules a scenario can adopt (``rules: agentx``): locked settings that a scenario
may not contradict, and defaults filled in where it says nothing, so a run is comparable
with published AgentX numbers. The mapping of each AgentX rule to a scenario key, and where
each figure comes from, is in docs/agentx.md.

Defaults are filled into the scenario's plain data before it is validated
(:func:`fill_defaults`); the locks are checked on the validated scenario
(:func:`conflicts`): once the defaults are in, every conflict is a value the user wrote."""

from __future__ import annotations

from typing import Any

AGENTX = "agentx"

#: AgentX: the shortest benchmark duration, s (AIPerf's inferencex-agentx-mvp floor)
MIN_DURATION_S = 900.0
#: AgentX: the duration when the scenario gives none, s
DEFAULT_DURATION_S = 1800.0
#: AgentX: the whole-system idle gap is capped at this, s
IDLE_CAP_S = 10.0
#: AgentX: warmup requests per lane, excluded from every figure: one (the turn before t*),
#: as AIPerf 0.13.0 and its FAQ do; the v0.14.0 pages' ten measured half the requests of
#: AIPerf's run over the same window (docs/agentx.md, cross-check)
WARMUP_REQUESTS_PER_LANE = 1
#: AgentX: t* is drawn uniformly over this share of each lane's first trajectory
START_MIN_RATIO = 0.0
START_MAX_RATIO = 1.0
#: AgentX: t* is a point in each trajectory's recorded time (AIPerf 0.13.0)
START_BY = "time"
#: AgentX: the run is invalid when more than this share of requests overflow the context
OVERFLOW_RATE_LIMIT = 0.01
#: AgentX: TTFT/ITL observations must reach this share of the profiling phase
OBSERVED_SHARE = 0.95

_OVERRIDE = "set unsafe_override: true to run anyway (the run is then invalid)"


def _section(data: dict[str, Any], key: str) -> dict[str, Any] | None:
    """``data[key]`` as a mapping to fill (started when absent); None when it is something
    else (validation will say so)."""
    if data.get(key) is None:
        data[key] = {}
    sec = data[key]
    return sec if isinstance(sec, dict) else None


def fill_defaults(data: dict[str, Any]) -> None:
    """Fill the AgentX defaults into scenario ``data`` (in place) where it sets nothing."""
    if data.get("rules") != AGENTX:
        return
    timing = _section(data, "timing")
    if timing is not None:
        timing.setdefault("idle_cap_s", IDLE_CAP_S)  # explicit: applies in virtual time too
    limits = _section(data, "limits")
    if limits is not None and limits.get("duration_s") is None:
        limits["duration_s"] = DEFAULT_DURATION_S
    warmup = _section(data, "warmup")
    if warmup is not None:
        for k, v in (("enabled", True), ("random_start", True),
                     ("requests_per_lane", WARMUP_REQUESTS_PER_LANE),
                     ("start_min_ratio", START_MIN_RATIO),
                     ("start_max_ratio", START_MAX_RATIO), ("start_by", START_BY),
                     ("every_stage", True)):
            warmup.setdefault(k, v)
    for ep in data.get("endpoints") or []:
        if isinstance(ep, dict) and ep.get("kind", "openai") == "openai" \
                and ep.get("ignore_eos") is None:
            ep["ignore_eos"] = True


def conflicts(sc: Any) -> list[tuple[str, str]]:
    """(key path, why) for every setting of ``sc`` that contradicts its rules."""
    if sc.rules != AGENTX:
        return []
    out: list[tuple[str, str]] = []

    def bad(key: str, why: str) -> None:
        out.append((key, f"{why} (rules: agentx); {_OVERRIDE}"))

    if sc.load.kind != "lanes":
        bad("load.kind", "AgentX is a closed loop of concurrent lanes, not arrivals at a rate")
    t = sc.timing
    if t.strategy != "think-only":
        bad("timing.strategy", f"{t.strategy!r}: AgentX honours recorded think times "
            "end-to-start (think-only)")
    if t.time_scale != 1.0:
        bad("timing.time_scale", f"{t.time_scale:g}: AgentX honours recorded think times "
            "unscaled (1)")
    if t.idle_cap_s != IDLE_CAP_S:
        bad("timing.idle_cap_s", f"{t.idle_cap_s}: AgentX caps the whole-system idle gap at "
            f"{IDLE_CAP_S:g} s")
    lim = sc.limits
    if lim.duration_s is None or lim.duration_s < MIN_DURATION_S:
        bad("limits.duration_s", f"{lim.duration_s:g} s is below AgentX's {MIN_DURATION_S:g} s "
            "minimum" if lim.duration_s is not None else "AgentX runs for a duration")
    if lim.max_requests is not None:
        bad("limits.max_requests", "an AgentX run is bounded by its duration only")
    if lim.max_sessions is not None:
        bad("limits.max_sessions", "an AgentX run is bounded by its duration only")
    if not lim.recycle:
        bad("limits.recycle", "AgentX lanes replay fresh, cache-busted copies when the "
            "trace runs out")
    tr = sc.trace
    if tr.transform.max_context_tokens is not None:
        bad("trace.transform.max_context_tokens", "AgentX sends prompts untruncated (drop "
            "trees that cannot fit with trace.filters.max_context_tokens instead)")
    if tr.transform.scale is not None:
        bad("trace.transform.scale", "AgentX sends the recorded token counts")
    if tr.kind != "file":
        bad("trace.kind", "AgentX replays a recorded Weka corpus, not a synthetic trace")
    elif tr.format not in (None, "weka"):
        bad("trace.format", f"{tr.format!r}: AgentX replays a Weka corpus")
    if sc.prompt.shared_prefix_tokens:
        bad("prompt.shared_prefix_tokens", "a prefix shared across sessions defeats AgentX's "
            "first-turn cache-busting")
    w = sc.warmup
    if not w.enabled:
        bad("warmup.enabled", "AgentX warms each lane up before measuring")
    if not w.random_start:
        bad("warmup.random_start", "AgentX starts each lane at a random point t*")
    for i, ep in enumerate(sc.endpoints):
        if ep.kind == "openai" and (ep.ignore_eos is False
                                    or ep.extra_body.get("ignore_eos") is False):
            key = "ignore_eos" if ep.ignore_eos is False else "extra_body.ignore_eos"
            bad(f"endpoints.{i}.{key}", "AgentX sends ignore_eos so outputs follow the trace")
    return out


def run_rules(sc: Any) -> dict[str, Any] | None:
    """What run.json records of the rules: their name, the override flag and every
    overridden lock (one line each); None without rules."""
    if sc.rules is None:
        return None
    return {"name": sc.rules, "unsafe_override": sc.unsafe_override,
            "overrides": [f"{k}: {why.split(' (rules:')[0]}" for k, why in conflicts(sc)],
            "overflow_rate_limit": OVERFLOW_RATE_LIMIT, "observed_share": OBSERVED_SHARE}
