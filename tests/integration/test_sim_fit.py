"""The simulator fitted to each real engine and checked on work it was not fitted on
(docs/simulator.md, "How close"): ``scripts/sim_accuracy.py`` with one held-out run of
each kind (Weka-style sessions, Mooncake-style cold prompts), so
that a change that makes the simulator or the fit worse at predicting llama.cpp or vLLM
fails here. The margins are the errors measured for docs/simulator.md plus the engine's
own run-to-run spread measured there (this machine is small and shared; the issue's
targets are in the table, and these margins are what was reached, not what was aimed at).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from agentbench.engines.locate import find_llama_server, find_llama_vocab, find_vllm_python
from tests.helpers import ROOT
from tests.integration import budget
from tests.integration.engine_run import need, results_dir

#: two tries of up to ~1,500 s each (vLLM in CI, 2026-12-06); a CI deadline cuts it shorter
pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

#: |error| allowed per figure on the held-out Weka-style run (relative; hit rate: points):
#: the largest of three measurements (the grid-fitted preset's error in docs/simulator.md
#: plus the engine's run-to-run spread there, and this test's first two runs' errors),
#: plus 10 points, rounded up. TTFT p90 over this run's 58 requests rests on its six
#: slowest, a few cold subagent prompts: llama.cpp's measured p90 was 470-3,210 ms across
#: runs, and the prediction's error -83% to +204% (vLLM: -83% to -52%), so only a gross
#: error fails there
MARGINS: dict[str, dict[str, float]] = {
    "llama": {"ttft_p50": 0.55, "ttft_p90": 2.5, "itl_p50": 0.5, "e2e_p50": 0.65,
              "throughput": 0.35, "hit_rate": 2.0},
    "vllm": {"ttft_p50": 0.4, "ttft_p90": 2.5, "itl_p50": 1.4, "e2e_p50": 0.3,
             "throughput": 0.2, "hit_rate": 2.0},
}
#: the same on the held-out Mooncake-style run (cold prompts, some longer than the
#: engine's context window), for the figures a served-but-refused prompt moves: the grid
#: fit's error measured 2026-12-04 plus the engine's spread plus 10 points, rounded up.
#: Without the preset's context window, vLLM's errors were E2E +29-32% and throughput
#: -22-24% (docs/simulator.md, "The engine's context window")
MOONCAKE_MARGINS: dict[str, dict[str, float]] = {
    "llama": {"e2e_p50": 0.4, "throughput": 0.25},
    "vllm": {"e2e_p50": 0.2, "throughput": 0.2},
}
#: as measured for docs/simulator.md: llama-server on its own core, the client on the other
PIN = {"llama": True, "vllm": False}


def _measure() -> Any:
    spec = importlib.util.spec_from_file_location("sim_accuracy",
                                                  ROOT / "scripts" / "sim_accuracy.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.measure


@pytest.mark.parametrize("engine", ["vllm", "llama"])  # vLLM first: conftest.ORDER
def test_a_preset_fitted_to_the_engine_predicts_held_out_work(
        engine: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    if engine == "llama":
        need(find_llama_server(), "no llama-server: run `bash scripts/ci_engines.sh llama`")
        need(find_llama_vocab(), "no llama vocab: run `bash scripts/ci_engines.sh llama`")
    else:
        need(find_vllm_python(), "no vLLM CPU: run `bash scripts/ci_engines.sh vllm`")
    # the grid fit explains its own windows (a fit on the scenario's run alone may not:
    # docs/simulator.md); residuals measured here 3-9% (TTFT) and 5-21% (decode). Residuals
    # of 75-79% seen in CI came from a client reading one step's tokens >1 ms apart (fixed
    # in the fit, docs/simulator.md "Why it misses"); the grid's timings still disagree
    # now and then (18.5% on a first attempt in a clean-clone CI run on 2026-12-02, 5.8%
    # on its retry, every window kind about equally off), and so does the held-out run
    # (llama.cpp, 2026-12-02 05:50-06:25, three runs in a row, one with the code of
    # 02:30: throughput +38% to +46%, E2E p50 1,540-1,654 ms against 917 ms measured at
    # 02:30, 0.5-5 s stalls inside streams): the whole measurement is then taken again,
    # once, and both are shown. Each try runs only if the CI time left holds it
    # (tests/integration/budget.py): a retry that does not fit fails with the first try
    tries: list[dict[str, Any]] = []
    what = f"a simulator fit to {engine} checked on held-out work"
    for attempt in range(2):
        if attempt and not budget.fits(f"sim-fit-{engine}"):
            pytest.fail(f"{what}: the first try missed and the CI time left holds no "
                        f"second ({budget.shortfall(f'sim-fit-{engine}')}): {tries}")
        out = results_dir(tmp_path_factory, f"sim-fit-{engine}-{attempt}")
        with budget.step(f"sim-fit-{engine}", what):
            result = _measure()(engine, Path(out), repeats=1, held=("weka", "mooncake"),
                                pin=PIN[engine])
        fits = result["fits"]
        assert set(fits) == {"run", "grid", "run+grid"}
        res = fits["grid"]["residuals"]
        held = fits["grid"]["held_out"]
        # the engine refused some Mooncake prompts as longer than its context window; the
        # preset, with the window from the engine's command, refuses the same ones (not a
        # timing: exact on any host)
        refused = held["mooncake"]["refused"]
        assert refused["measured"][0], "the engine refused no prompt: the check is void"
        # as many failed on each side as on both: the same requests
        assert refused["predicted"] == refused["measured"] == refused["both"], refused
        misses = {f"{name} {m}": (round(held[name][m]["error"], 3), limit)
                  for name, margins in (("weka", MARGINS[engine]),
                                        ("mooncake", MOONCAKE_MARGINS[engine]))
                  for m, limit in margins.items() if abs(held[name][m]["error"]) > limit}
        explained = res["ttft_median"] < 0.15 and res["decode_median"] < 0.3
        tries.append({"residuals": res, "held_out_misses": misses})
        if explained and not misses:
            break
    assert explained, f"the grid fit does not explain its own windows: {tries}"
    assert not misses, tries
