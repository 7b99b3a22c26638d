"""What a run is set up from before its stages, apart from the run itself (``runner``):
the scenario's trace (loaded, its prompts remembered across the runs that replay it), the
worker count ``--workers auto`` picks once the endpoints are open, and the GPUs a simulated
endpoint models."""

from __future__ import annotations

from typing import Any

from agentbench.prompts.layout import BlockCache
from agentbench.prompts.memo import PromptMemo
from agentbench.replay.endpoints import LiveEndpoint
from agentbench.replay.stages import max_lanes
from agentbench.scenario.endpoints import is_simulated
from agentbench.traces.model import Trace


async def auto_workers(scenario: Any, endpoints: list[LiveEndpoint],
                       caches: dict[str, BlockCache], info: dict[str, Any],
                       one_process: bool) -> int:
    """``--workers auto`` (:mod:`agentbench.replay.autoworkers`): probe each endpoint's
    stream rate and pick the worker count; recorded in run.json."""
    from agentbench.replay.autoworkers import choose
    from agentbench.replay.workers import resolve_workers

    rates = [await e.transport.stream_rate(caches[e.api]) for e in endpoints]
    pick = choose(rates, max_lanes(scenario.load), scenario.runs_simulator)
    n = 1 if one_process else resolve_workers(pick["workers"], scenario)
    if one_process:
        pick["why"] += "; one process: rows are reported to on_request"
    info["workers"] = n
    info["workers_auto"] = pick
    return n


def load_trace(scenario: Any) -> Trace:
    from agentbench.traces.load import load_scenario_trace

    return load_scenario_trace(scenario.trace, scenario.seed)


def share_prompts(trace: Trace) -> None:
    """Remember ``trace``'s prompts across the runs that replay it (``trace.memo``: its
    owner keeps the trace unchanged), as the variants of a sweep do: a prompt made for
    one variant is copied for the next (``prompts.memo``)."""
    if "prompts" not in trace.memo:
        trace.memo["prompts"] = PromptMemo()


def modeled_gpus_of(cfg: Any) -> int | None:
    """The GPUs a simulated endpoint models (run.json ``endpoints[].modeled_gpus``); None
    for a real endpoint, or when a preset does not say."""
    if not is_simulated(cfg):
        return None
    from agentbench.sim.presets import modeled_gpus

    return modeled_gpus(cfg)
