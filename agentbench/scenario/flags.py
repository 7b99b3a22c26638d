"""A scenario built from ``agentbench run`` flags, without a YAML file: one
OpenAI-compatible endpoint, a trace, a load and bounds. It is validated and checked as a
file is, and a problem names the flag the user typed (``--url``, not ``endpoints.0.url``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentbench.errors import InputError
from agentbench.traces import MAX_SYNTH_SESSIONS

#: the trace a flags-only run replays when ``--trace`` is not given: the bundled Claude
#: Code traces. SWITCH: "synth:codex:20" (a synthetic Codex-profile trace) needs no data
#: files, should the bundled traces ever be left out of the package.
DEFAULT_TRACE = "builtin:claude-code-weka"
#: lanes when neither --concurrency nor --rate is given
DEFAULT_CONCURRENCY = 4
#: seconds a flags-only run lasts when neither --duration nor --max-requests is given
DEFAULT_DURATION_S = 60.0
#: root sessions a ``synth:PROFILE`` trace has when the count is left out
DEFAULT_SYNTH_SESSIONS = 20
#: where each flag lands in the scenario (errors under these keys name the flag)
FLAG_KEYS = {"url": ("--url", "endpoints.0.url"), "model": ("--model", "endpoints.0.model"),
             "api": ("--api", "endpoints.0.api"),
             "concurrency": ("--concurrency", "load.concurrency"),
             "rate": ("--rate", "load.rate_per_s"), "trace": ("--trace", "trace"),
             "duration_s": ("--duration", "limits.duration_s"),
             "max_requests": ("--max-requests", "limits.max_requests"),
             "seed": ("--seed", "seed"), "rules": ("--rules", "rules"),
             "unsafe_override": ("--unsafe-override", "unsafe_override")}
#: what the user is told the errors came from
SOURCE = "command line"


def trace_spec(text: str, where: str = "--trace") -> dict[str, Any]:
    """``--trace``: ``synth:PROFILE[:SESSIONS]`` a synthetic trace (agentx, codex or a
    profile file), anything else a trace source as a scenario's ``trace.source`` takes it
    (a file, a folder, a dataset id, ``builtin:NAME``). ``where``: the flag or argument
    an error names."""
    if not text:
        raise InputError("give a trace: a file, folder, dataset id, builtin:NAME or "
                         "synth:PROFILE[:SESSIONS]", source=where)
    if text.startswith("synth:"):
        profile, _, count = text.removeprefix("synth:").partition(":")
        if not profile or (count and not (count.isascii() and count.isdigit())):
            raise InputError(f"expected synth:PROFILE[:SESSIONS] (e.g. synth:codex:20), got "
                             f"{text!r}", source=where)
        # by its digits first: int() refuses a 5,000-digit string with a traceback
        digits = count.lstrip("0")
        if len(digits) > len(str(MAX_SYNTH_SESSIONS)) or int(digits or 0) > MAX_SYNTH_SESSIONS:
            got = digits if len(digits) <= 24 else "a number past 10**24"
            raise InputError(f"synth:PROFILE:SESSIONS takes at most {MAX_SYNTH_SESSIONS:,} "
                             f"sessions, got {got}", source=where)
        return {"kind": "synth", "profile": profile,
                "sessions": int(digits or 0) if count else DEFAULT_SYNTH_SESSIONS}
    return {"kind": "file", "source": text}


def scenario_data(url: str, model: str, *, api: str | None = None,
                  concurrency: int | None = None, rate: float | None = None,
                  trace: str | None = None, duration_s: float | None = None,
                  max_requests: int | None = None, seed: int | None = None,
                  rules: str | None = None, unsafe_override: bool | None = None
                  ) -> dict[str, Any]:
    """The scenario (plain data, not validated yet) the ``run`` flags describe. With
    ``rules`` (agentx) the rules' own duration default applies, not this module's."""
    if concurrency is not None and rate is not None:
        raise InputError("give --concurrency (closed loop: lanes) or --rate (open loop: "
                         "sessions arriving per second), not both", source=SOURCE)
    load: dict[str, Any] = (
        {"kind": "rate", "arrival": "poisson", "rate_per_s": rate} if rate is not None
        else {"kind": "lanes", "concurrency":
              DEFAULT_CONCURRENCY if concurrency is None else concurrency})
    if duration_s is None and max_requests is None and rules is None:
        duration_s = DEFAULT_DURATION_S
    limits = {k: v for k, v in (("duration_s", duration_s), ("max_requests", max_requests))
              if v is not None}
    extra: dict[str, Any] = {"rules": rules} if rules is not None else {}
    if unsafe_override:
        extra["unsafe_override"] = True
    return {
        **extra,
        "name": model or "run",
        "description": "built from agentbench run flags",
        "seed": 0 if seed is None else seed,
        "endpoints": [{"kind": "openai", "url": url, "model": model, "api": api or "chat"}],
        "trace": trace_spec(DEFAULT_TRACE if trace is None else trace),
        "load": load,
        "limits": limits,
    }


def scenario_from_flags(url: str | None, model: str | None, *,
                        sets: list[tuple[str, Any]] | None = None,
                        set_labels: dict[str, str] | None = None,
                        base_dir: Path | None = None, **flags: Any) -> Any:
    """A validated, checked ``Scenario`` from the ``run`` flags (see :func:`scenario_data`)
    with ``--set`` overrides; a relative ``--trace`` path is relative to ``base_dir`` (the
    current folder)."""
    from agentbench.scenario.loading import (
        ScenarioError,
        check_scenario,
        label_problems,
        validate_data,
    )

    if url is None or model is None:
        missing = " and ".join(f for f, v in (("--url", url), ("--model", model)) if v is None)
        raise InputError(f"give a scenario file, or {missing} for a run built from flags "
                         "(agentbench run --url http://127.0.0.1:8000 --model M)",
                         source=SOURCE)
    data = scenario_data(url, model, **flags)
    # a problem names a flag the user typed (a default is named by its key), and a --set
    # of the same key wins over the flag
    given = {"url": url, "model": model, **flags}
    labels = {key: flag for name, (flag, key) in FLAG_KEYS.items()
              if given.get(name) is not None}
    labels.update({key: f"--set {key}" for key, _ in sets or []})
    labels.update(set_labels or {})  # sets that other flags made (--output, --run-id)
    sc = validate_data(data, SOURCE, sets=sets, labels=labels)
    problems, _ = check_scenario(sc, base_dir or Path.cwd())
    if problems:
        raise ScenarioError(SOURCE, label_problems(problems, labels))
    return sc

