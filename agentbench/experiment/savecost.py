"""The cost of llama-server's saves to its host-RAM prompt cache, as the grid's save probe
measures it (``simgrid``, trace ``sim-fit-save``; docs/simulator.md, "Fitting a preset").

At each new task llama-server saves the prompt of every idle slot it has not saved yet
(``--cache-idle-slots`` with ``--cache-ram``, both on by default), and nothing else runs
meanwhile. The probe's rounds each send a cold long prompt, then a short new prompt (its
first token waits for the long prompt's save), then the short prompt extended by one block
(nothing left to save); the difference of the two short prompts' first-token times is the
save. An engine without such saves measures about 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.results import jsonfile
from agentbench.sim.cost import FittedCost, StepFit


@dataclass
class SaveCost:
    """What the grid's save probe measured: seconds per token saved (the median of its
    rounds, each the first-token delay a new task met over the same task without a save,
    per token of the long prompt saved, in the simulator's tokens), every round's figure,
    and the runs it came from."""

    s_per_token: float
    rounds: list[float]
    tokens: float
    source: str


def is_save_probe(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` is a run of the grid's save probe (its trace's name says)."""
    from agentbench.experiment.simgrid import SAVE_TRACE

    try:
        data = jsonfile.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # run_timeline says what is wrong with it
    trace = data.get("trace") if isinstance(data, dict) else None
    return isinstance(trace, dict) and trace.get("name") == SAVE_TRACE


def save_cost(run_dirs: str | Path | Sequence[str | Path],
              coef: Mapping[str, float] | None = None) -> SaveCost:
    """The save probe's cost per token saved (see ``SaveCost``), the rounds of every run
    given pooled: round ``r``'s short prompt (``s{r}-short``, turn 0) waited for the save
    of the long one before it (``s{r}-long``), its extension (turn 1) did not; a round that
    failed is left out. Where the two computed different prompt work (an engine's cache
    reuses what it can), the difference is priced with the fit's step terms (``coef``:
    prefill tokens, attention pairs and KV tokens read) and taken out."""
    from agentbench.metrics.run import load

    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    c = FittedCost(StepFit(**coef)) if coef else None
    rounds: list[float] = []
    sizes: list[float] = []
    for run_dir in dirs:
        run = load(Path(run_dir))
        req = run.records.requests
        sec = run.time_base.factor / 1e9
        ok = req[req["status"] == "ok"]
        by: dict[tuple[str, int], Any] = {
            (str(s), int(t)): row for s, t, row in
            zip(ok["session_id"], ok["turn"], ok.itertuples(index=False), strict=True)}
        for (sid, turn), long in sorted(by.items()):
            if not sid.endswith("-long") or turn != 0:
                continue
            short = sid[:-len("-long")] + "-short"
            a, b = by.get((short, 0)), by.get((short, 1))
            if a is None or b is None or any(v != v for v in (a.first_token_ns,
                                                              b.first_token_ns)):
                continue
            delay = float((a.first_token_ns - a.sent_ns) - (b.first_token_ns - b.sent_ns)) \
                * sec - _prefill_s(a, c) + _prefill_s(b, c)
            out = float(long.completion_tokens)
            saved = float(long.expected_input_tokens) + (out - 1.0 if out >= 1 else 0.0)
            rounds.append(max(delay, 0.0) / saved)
            sizes.append(saved)
    if not rounds:
        raise InputError("the save probe has no round whose three requests succeeded",
                         source=", ".join(str(d) for d in dirs))
    return SaveCost(s_per_token=float(np.median(rounds)), rounds=rounds,
                    tokens=float(np.median(sizes)), source=", ".join(str(Path(d))
                                                                     for d in dirs))


def _prefill_s(r: Any, cost: FittedCost | None) -> float:
    """The simulator's step-model time (``FittedCost``) for a request's prompt work: its new
    tokens after its cached ones, and the KV tokens they read."""
    if cost is None:
        return 0.0
    n = _new_tokens(r)
    cached = max(_expected(r) - n, 0.0)
    return cost.prefill_flops(n, cached) + (cached + n) * cost.kv_s


def _expected(r: Any) -> float:
    v = float(r.expected_input_tokens)
    return v if math.isfinite(v) else 0.0


def _new_tokens(r: Any) -> float:
    """The prompt tokens a request computed, in the simulator's tokens (0 when its usage is
    missing)."""
    prompt, cached, expected = (float(v) for v in (r.prompt_tokens, r.cached_tokens,
                                                    r.expected_input_tokens))
    if not all(math.isfinite(v) for v in (prompt, cached, expected)) or prompt <= 0:
        return 0.0
    return (prompt - cached) * expected / prompt
