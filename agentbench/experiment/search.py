"""``agentbench search``: the most load that still meets the scenario's SLOs
(docs/metrics.md, "Capacity search").

The scenario's load (lanes, or a rate of arriving sessions) is replaced by one value per
probe; each probe is a run of its own (``run_variant``: its results folder, summary and
verdicts, as ``agentbench run`` makes them). A probe passes when its goodput (requests, or
agents) reaches ``target``. The search first runs the two ends of the range, then bisects
between the highest passing and the lowest failing load until they are adjacent (lanes)
or within ``tolerance`` of each other (rates), or ``max_probes`` runs were made. It
assumes goodput falls as load rises; a probe that contradicts that (a higher load passing
after a lower one failed) is reported, not hidden. The frontier (every probe's load,
goodput, TTFT and throughput per GPU) is the answer's evidence.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbench.errors import InputError


@dataclass
class Probe:
    """One run at one load and how it did."""

    load: float
    run_dir: str
    goodput: float | None
    passed: bool
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    per_gpu_tok_s: float | None
    requests: int
    note: str | None = None
    #: lanes that sent a measured request (the summary's delivered load); None: open loop
    lanes_active: int | None = None
    #: the share of prompt tokens the server had cached, and the most its trace could
    #: reuse: above it, the server held this probe's prompts from an earlier probe
    hit_rate: float | None = None
    hit_rate_potential: float | None = None


@dataclass
class SearchResult:
    """The probes in the order they ran and the answer (None: no load passed)."""

    kind: str  # "lanes" or "rate"
    goal: str
    target: float
    probes: list[Probe] = field(default_factory=list)
    best: float | None = None
    best_failing: float | None = None
    notes: list[str] = field(default_factory=list)
    #: the search was stopped (Ctrl-C, SIGTERM) before its end: the probes that finished
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: a probe whose goodput is None: it counts as failing, but no SLO was missed (--goal
#: agents on runs whose bound ended every agent early said "no load meets the SLOs")
_NOTHING = "no {0} to judge, none completed or failed within the run's bounds"


def _goodput(summary: dict[str, Any], goal: str) -> float | None:
    v = summary["overall"]["goodput"].get(goal)
    return None if v is None else float(v)


def _hit(summary: dict[str, Any], kind: str) -> float | None:
    v = ((summary["overall"].get("hit_rate") or {}).get(kind) or {}).get("value")
    return float(v) if isinstance(v, int | float) else None


def search(scenario: Any, *, lo: float, hi: float, goal: str = "requests",
           target: float = 0.9, max_probes: int = 8, tolerance: float = 0.05,
           scenario_path: Path | None = None,
           on_probe: Callable[[Probe], None] | None = None,
           on_stop: Callable[[SearchResult], None] | None = None) -> SearchResult:
    """Bisect the load of ``scenario`` between ``lo`` and ``hi`` for the most that keeps
    ``goal`` goodput (``requests`` or ``agents``) at or above ``target``. Stopped before
    its end once a probe has finished (Ctrl-C, SIGTERM, or an error: the endpoint gone, the
    disk full), ``on_stop`` is given the search so far, ``interrupted``, before the stop or
    the error goes on: the probes that finished are its evidence, minutes of runs each
    against a real endpoint."""
    lo, hi = _search_range(scenario, lo, hi, goal, target)
    out = SearchResult(kind=scenario.load.kind, goal=goal, target=target)
    at: list[float] = []  # the load being probed
    try:
        return _bisect(scenario, out, lo, hi, target, max_probes, tolerance, scenario_path,
                       on_probe, at)
    except BaseException as e:  # KeyboardInterrupt, CancelledError (SIGTERM in a run), ...
        if on_stop is not None and out.probes:
            out.interrupted = True
            unit = "lanes" if out.kind == "lanes" else "sessions/s"
            how = (f"stopped by an error ({_one_line(e)})" if isinstance(e, Exception)
                   else "interrupted")
            cut = (f" during the probe at {at[-1]:g} {unit} (not counted; a run folder "
                   "it made is kept)" if at and at[-1] not in
                   {p.load for p in out.probes} else "")
            out.notes.append(f"{how} after {len(out.probes)} probe"
                             f"{'s' * (len(out.probes) != 1)}{cut}: the answer is the "
                             "search's so far")
            on_stop(_checked(out))
        raise


def _one_line(e: Exception) -> str:
    """agentbench's own error as its one line (secrets already redacted in it); any other
    by its type alone, as its text may hold what a file must not (a URL's user-info)."""
    one = getattr(e, "one_line", None)
    if not callable(one):
        return type(e).__name__
    text = " ".join(str(one()).split())
    return text if len(text) <= 300 else text[:299] + "…"


def _bisect(scenario: Any, out: SearchResult, lo: float, hi: float, target: float,
            max_probes: int, tolerance: float, scenario_path: Path | None,
            on_probe: Callable[[Probe], None] | None, at: list[float]) -> SearchResult:
    """The probes of ``search``, into ``out``; ``at`` gets each load as its probe starts."""
    from agentbench.experiment.run import run_variant

    goal = out.goal
    lanes = out.kind == "lanes"
    done: dict[float, Probe] = {}

    def probe(x: float) -> Probe:
        at.append(x)
        sc = scenario.model_copy(deep=True)
        sc.variants = []
        if lanes:
            sc.load.concurrency = int(x)
            label = f"c{int(x)}"
        else:
            sc.load.rate_per_s = x
            label = f"r{x:g}"
        sc.name = f"{scenario.name}-search-{label}"
        sc.output.run_id = None  # one folder per probe: <name>-search-<load>-<time>
        run = run_variant(sc, scenario_path=scenario_path)
        s = run.summary
        g = _goodput(s, goal)
        lat = s["overall"]["latency"]["ttft_ms"]
        p = Probe(load=x, run_dir=str(run.run_dir), goodput=g,
                  passed=g is not None and g >= target and run.failure is None,
                  ttft_p50_ms=lat.get("p50"), ttft_p90_ms=lat.get("p90"),
                  per_gpu_tok_s=s["overall"]["throughput"].get("per_gpu_total_tok_s"),
                  requests=int(s["overall"]["requests"]["total"]),
                  note=run.failure or (None if g is not None else _NOTHING.format(goal)),
                  lanes_active=(s["overall"].get("load") or {}).get("lanes_active"),
                  hit_rate=_hit(s, "usage"), hit_rate_potential=_hit(s, "potential"))
        done[x] = p
        out.probes.append(p)
        if on_probe is not None:
            on_probe(p)
        return p

    def close_enough(a: float, b: float) -> bool:
        return b - a <= 1 if lanes else (b - a) <= tolerance * b

    top = probe(hi)
    if top.passed:
        out.best = hi
        from agentbench.scenario.model import MAX_LANES

        out.notes.append(
            f"the top of the range passed, at the most lanes a scenario may run ({hi:g})"
            if lanes and hi >= MAX_LANES else
            f"the top of the range passed: raise it (more than {hi:g} may pass)")
        return _checked(out)
    out.best_failing = hi
    if max_probes == 1:
        out.notes.append(f"only the top of the range was probed (--max-probes 1): below "
                         f"{hi:g} is unknown")
        return _checked(out)
    if len(out.probes) < max_probes and lo < hi:
        bottom = probe(lo)
        if not bottom.passed:
            out.best_failing = lo
            out.notes.append(_bottom_failed(bottom, goal))
            return _checked(out)
        out.best = lo
    while out.best is not None and out.best_failing is not None \
            and not close_enough(out.best, out.best_failing) \
            and len(out.probes) < max_probes:
        mid = _midpoint(out.best, out.best_failing, lanes)
        if mid in done:
            break
        if probe(mid).passed:
            out.best = mid
        else:
            out.best_failing = mid
    if out.best is not None and out.best_failing is not None \
            and not close_enough(out.best, out.best_failing):
        out.notes.append(f"stopped after {len(out.probes)} probes (--max-probes): the answer "
                         f"lies between {out.best:g} and {out.best_failing:g}")
    return _checked(out)


def _bottom_failed(bottom: Probe, goal: str) -> str:
    """Why the range's bottom failed: its SLOs, or nothing of ``goal`` to judge."""
    if bottom.goodput is not None:
        return f"the bottom of the range failed: no load from {bottom.load:g} meets the SLOs"
    return (f"the bottom of the range had {_NOTHING.format(goal)}: raise limits.max_requests "
            "or limits.duration_s, or search --goal requests")


def _midpoint(a: float, b: float, lanes: bool) -> float:
    """The load between ``a`` and ``b`` to probe next: whole lanes, or a rate of 6
    decimals, or of 6 significant digits where 6 decimals are no rate between them (the
    midpoint of 1e-06 and 2e-06 was 2e-06, probed already: the search stopped there)."""
    mid = (a + b) / 2
    if lanes:
        return float(math.floor(mid))
    r = round(mid, 6)
    return r if a < r < b else float(f"{mid:.6g}")


def _search_range(scenario: Any, lo: float, hi: float, goal: str, target: float
                  ) -> tuple[float, float]:
    """The checked range to search (lanes in whole numbers); one-line
    ``InputError`` for a scenario or a range a search cannot use."""
    if not any(v is not None for v in scenario.slos.model_dump().values()):
        raise InputError("set slos (e.g. ttft_ms) to search for the load that meets them",
                         field="slos")
    if goal not in ("requests", "agents"):
        raise InputError("must be requests or agents", field="--goal")
    if not 0 < target <= 1:
        raise InputError("must be in (0, 1]", field="--target")
    if scenario.variants:
        raise InputError("search one variant at a time: remove variants, or --set the "
                         "variant's keys", field="variants")
    kind = scenario.load.kind
    lanes = kind == "lanes"
    flag = "--lanes" if lanes else "--rate"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise InputError(f"the range must be finite numbers, got {lo:g}:{hi:g}", field=flag)
    if not 0 < lo <= hi:
        raise InputError(f"the range must be 0 < low <= high, got {lo:g}:{hi:g}", field=flag)
    if lanes and (lo != math.floor(lo) or hi != math.floor(hi)):  # 1.5:4 searched 2:4
        raise InputError(f"lanes are whole numbers, got {lo:g}:{hi:g}", field=flag)
    from agentbench.scenario.model import MAX_LANES

    if lanes and hi > MAX_LANES:
        raise InputError(f"at most {MAX_LANES:,} lanes, got {hi:g}", field=flag)
    if kind == "rate" and scenario.load.arrival == "trace":
        raise InputError("an arrival: trace load has no rate to search", field="load")
    if not lanes:  # each end as a scenario's rate: within its bounds, before any probe
        from pydantic import ValidationError

        for v in (lo, hi):
            try:
                type(scenario.load).model_validate(
                    {**scenario.load.model_dump(), "rate_per_s": v})
            except ValidationError as e:
                why = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
                raise InputError(f"{why}, got {v:g}", field=flag) from None
    return lo, hi


def _checked(out: SearchResult) -> SearchResult:
    """A note for each pair of probes where more load did better than less (noise, or a
    load the search's monotone premise does not hold for), for a passing lanes probe
    that could not use its lanes (the trace ran out: the load was never delivered), and
    for probes whose server hit above their trace's potential (a real endpoint's cache
    kept an earlier probe's prompts: the same seed sends the same ones)."""
    ps = sorted(out.probes, key=lambda p: p.load)
    for p in ps:
        if out.kind == "lanes" and p.passed and p.lanes_active is not None \
                and p.lanes_active < p.load:
            out.notes.append(f"{p.load:g} lanes passed with only {p.lanes_active} of them "
                             "sending (the trace ran out: recycle it or give it more "
                             "sessions); that load was not delivered")
    warm = [p for p in ps if p.hit_rate is not None and p.hit_rate_potential is not None
            and p.hit_rate > p.hit_rate_potential + 0.005]
    if warm:  # the same seed's prompts: an earlier probe's are still in the server's cache
        unit = "lanes" if out.kind == "lanes" else "sessions/s"
        out.notes.append(f"{', '.join(f'{p.load:g}' for p in warm)} {unit}: the server "
                         "hit above what its trace could reuse, its cache holding an earlier "
                         "probe's prompts (every probe sends the same ones): that goodput "
                         "may be flattered; restart the server between probes to tell")
    for a, b in zip(ps, ps[1:], strict=False):
        if b.passed and not a.passed:
            out.notes.append(f"{b.load:g} passed where {a.load:g} failed: goodput does not "
                             "fall monotonically with load here (noise, or queueing that "
                             "helps the cache); read the frontier")
    return out


def format_search(res: SearchResult) -> list[str]:
    """The frontier table and the answer."""
    unit = "lanes" if res.kind == "lanes" else "sessions/s"
    lines = [f"{'load':>10}  {res.goal + ' goodput':>18}  {'TTFT p50':>10}  {'TTFT p90':>10}"
             f"  {'tok/s/GPU':>10}  verdict"]
    for p in sorted(res.probes, key=lambda p: p.load):
        g = "-" if p.goodput is None else f"{p.goodput:.1%}"
        lines.append(f"{p.load:>10g}  {g:>18}  {_ms(p.ttft_p50_ms):>10}  "
                     f"{_ms(p.ttft_p90_ms):>10}  {_n(p.per_gpu_tok_s):>10}  "
                     f"{'pass' if p.passed else 'FAIL'}" + (f" ({p.note})" if p.note else ""))
    answer = "answer so far" if res.interrupted else "answer"
    if res.best is None and res.interrupted:
        lines.append(f"{answer}: no load probed met {res.goal} goodput "
                     f">= {_share(res.target)}")
    elif res.best is None:
        lines.append(f"answer: no load in the range meets {res.goal} goodput "
                     f">= {_share(res.target)}")
    else:
        lines.append(f"{answer}: {res.best:g} {unit} (the most that met {res.goal} goodput "
                     f">= {_share(res.target)}"
                     + (f"; {res.best_failing:g} did not)" if res.best_failing else ")"))
    lines += [f"note: {n}" for n in res.notes]
    return lines


def _share(v: float) -> str:
    """A target as given: 0.995 is 99.5% (``:.0%`` printed 100%, a goal no probe meets)."""
    return f"{v * 100:.6g}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def _n(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def write_search(res: SearchResult, path: Path) -> None:
    """``path`` made whole with the search's JSON, only where nothing is: anything there
    (a file another search wrote while this one ran, a folder, a link, even one that leads
    nowhere) is never replaced nor written through, and ``FileExistsError`` is raised. The
    file is written beside it first, so a second Ctrl-C while it is written leaves no half
    file. (It replaced whatever was there: two searches into one folder at once both took
    the free name, and the one that ended last replaced the other's result.)"""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(res.to_json(), indent=1) + "\n")
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)  # EEXIST where anything is
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: a placeholder, then replaced
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
