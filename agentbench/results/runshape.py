"""The parts of run.json that figures are computed from, checked before they are used.

run.json is written whole by the run, but it is a text file people edit, copy and cut:
the summary reads its stages (each stage's window and lanes), the Ray workers and the
ones lost (which rows a lost worker sent), the rules (the validity verdict), the limits,
the simulated endpoints' ``speedup`` and ``timing.time_scale`` (the time base every
duration is multiplied by), ``idle_pulled_in_ns``, the status, the clock (``time_base``)
and the GPUs the simulated endpoints model. A value of another type there was a traceback
from ``load``, ``report`` and ``gate`` (``'str' object has no attribute 'get'``, ``KeyError:
'hostname'``, ``unhashable type: 'list'`` for a status, a division by zero for a speedup
of 0), and a speedup out of the simulator's bounds (NaN, -2) gave figures at speedup 1 or
negative ones without a word
(docs/reliability.md). Each check names run.json and the key path in one line; what a
writer leaves out (older runs, a run without Ray or rules) is not asked for.
"""

from __future__ import annotations

import math
from typing import Any

from agentbench.errors import InputError

#: nanoseconds past this are no time a run measured (about 292 years)
NS_MAX = 2**63 - 1


def _is_int(v: Any, lo: int = 0, hi: int = NS_MAX) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _is_num(v: Any, lo: float, hi: float) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) \
        and lo <= v <= hi


class _Check:
    """Raises one ``InputError`` naming run.json (``source``) and the key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, what: str, v: Any) -> None:
        shown = repr(v)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise InputError(f"{shown}, expected {what}", source=self.source, field=path)

    def mapping(self, d: dict[str, Any], key: str, path: str) -> dict[str, Any]:
        """``d[key]`` as a mapping ({} when absent or null)."""
        v = d.get(key)
        if v is not None and not isinstance(v, dict):
            self.fail(path, "a mapping", v)
        return v or {}

    def items(self, d: dict[str, Any], key: str, path: str) -> list[dict[str, Any]]:
        """``d[key]`` as a list of mappings ([] when absent or null)."""
        v = d.get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            self.fail(path, "a list", v)
        for i, x in enumerate(v):
            if not isinstance(x, dict):
                self.fail(f"{path}.{i}", "a mapping", x)
        return v

    def value(self, d: dict[str, Any], key: str, path: str, ok: Any, what: str,
              required: bool = False) -> None:
        if key not in d:
            if required:
                raise InputError("missing", source=self.source, field=f"{path}.{key}")
            return
        if not ok(d[key]):
            self.fail(f"{path}.{key}" if path else key, what, d[key])


def check_run_shape(run: dict[str, Any], source: str) -> None:
    """Raise an ``InputError`` when a part of ``run`` the figures use has the wrong type
    or a value no run writes (see the module's docstring)."""
    from agentbench.scenario.pricing import MAX_GPUS

    gpus_max = int(MAX_GPUS)  # the bound the scenario puts on ``hardware.gpus``
    c = _Check(source)
    ns, count = (lambda v: _is_int(v)), (lambda v: v is None or _is_int(v, 0, 2**31))
    c.value(run, "idle_pulled_in_ns", "", ns, "nanoseconds (a whole number from 0)")
    c.value(run, "status", "", lambda v: isinstance(v, str), "a text")
    # the clock the run was on: any other value read as the wall clock, silently
    c.value(run, "time_base", "", lambda v: v in ("wall", "virtual"), "'wall' or 'virtual'")
    for i, e in enumerate(c.items(run, "endpoints", "endpoints")):
        c.value(e, "modeled_gpus", f"endpoints.{i}", lambda v: v is None
                or _is_int(v, 0, gpus_max), f"a whole number of GPUs to {gpus_max:,}, or null")
    timed = isinstance(run.get("rules"), dict)  # the verdict reads each stage's start
    for i, st in enumerate(c.items(run, "stages", "stages")):
        p = f"stages.{i}"
        c.value(st, "label", p, lambda v: isinstance(v, str), "a text", required=True)
        for k in ("start_ns", "end_ns"):
            c.value(st, k, p, ns, "nanoseconds (a whole number from 0)", required=timed)
        c.value(st, "profile_start_ns", p, ns, "nanoseconds (a whole number from 0)")
        c.value(st, "lanes", p, count, "a whole number of lanes, or null")
    ray = c.mapping(run, "ray", "ray")
    for key in ("workers", "lost"):
        for i, w in enumerate(c.items(ray, key, f"ray.{key}")):
            p = f"ray.{key}.{i}"
            c.value(w, "worker", p, lambda v: _is_int(v, 0, 2**31), "a worker number",
                    required=True)
            if key == "workers":
                for k in ("hostname", "node"):
                    c.value(w, k, p, lambda v: isinstance(v, str), "a text", required=True)
    rules = run.get("rules")
    if isinstance(rules, dict):  # anything else reads as a run without rules
        share = (lambda v: _is_num(v, 0.0, 1.0)), "a share from 0 to 1"
        c.value(rules, "overflow_rate_limit", "rules", *share)
        c.value(rules, "observed_share", "rules", *share)
        c.value(rules, "overrides", "rules", lambda v: v is None or isinstance(v, list)
                and all(isinstance(x, str) for x in v), "a list of texts")
    _check_scenario(c, run)


def _check_scenario(c: _Check, run: dict[str, Any]) -> None:
    """The scenario's limits, time scale and simulated speedups, within the bounds the
    scenario itself puts on them (its model's own constants)."""
    from agentbench.scenario.endpoints import MAX_SPEEDUP, MIN_SPEEDUP
    from agentbench.scenario.model import MAX_TIME_SCALE

    sc = run.get("scenario")
    if not isinstance(sc, dict):  # no scenario: read as one (gate refuses it)
        return
    lim = c.mapping(sc, "limits", "scenario.limits")
    c.value(lim, "duration_s", "scenario.limits",
            lambda v: v is None or _is_num(v, 0.0, 1e9), "seconds (0 to 1e9), or null")
    timing = c.mapping(sc, "timing", "scenario.timing")
    c.value(timing, "time_scale", "scenario.timing",
            lambda v: _is_num(v, 0.0, MAX_TIME_SCALE), f"a number from 0 to {MAX_TIME_SCALE:g}")
    for i, e in enumerate(c.items(sc, "endpoints", "scenario.endpoints")):
        if e.get("kind") == "simulated":
            c.value(e, "speedup", f"scenario.endpoints.{i}",
                    lambda v: _is_num(v, MIN_SPEEDUP, MAX_SPEEDUP),
                    f"a number from {MIN_SPEEDUP:g} to {MAX_SPEEDUP:g}")
