"""AgentX rules against a real engine: scenarios/llama-cpp.yaml under ``rules: agentx``
with a short duration and ``unsafe_override`` (a smoke run, as AgentX users do): it runs,
every overridden lock is named, and the verdict is invalid with ``unsafe_override``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbench.engines.locate import find_llama_server, find_llama_vocab
from agentbench.metrics import summarize
from tests.helpers import SCENARIOS, free_port
from tests.integration import budget
from tests.integration.engine_run import need, results_dir, run_scenario_on_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

DEFAULT_PORT = 8091


def test_short_overridden_agentx_run_on_llama_cpp_is_invalid(
        tmp_path_factory: pytest.TempPathFactory, weka_dir: Path) -> None:
    need(find_llama_server(), "no llama-server: run `bash scripts/ci_engines.sh llama`")
    need(find_llama_vocab(), "no llama vocab GGUF: run `bash scripts/ci_engines.sh llama`")
    text = (SCENARIOS / "llama-cpp.yaml").read_text()
    text = text.replace("name: llama-cpp", "name: llama-cpp-agentx\nrules: agentx\n"
                        "unsafe_override: true", 1)
    # AgentX bounds a run by its duration and recycles trees: the shipped scenario's two
    # trees once each (max_sessions, recycle: false) would end during the lanes' warmup
    limits = "limits:\n  max_sessions: 2\n  recycle: false\n"
    assert limits in text
    text = text.replace(limits, "limits:\n  duration_s: 60\n", 1)
    path = tmp_path_factory.mktemp("scenario") / "llama-cpp-agentx.yaml"
    path.write_text(text)
    with budget.step("llama-agentx", "an AgentX run on llama.cpp"):
        run = run_scenario_on_port(path, results_dir(tmp_path_factory, "llama-agentx"),
                                   free_port(), DEFAULT_PORT)
    s = summarize(run.run_dir)
    v = s["validity"]
    assert v["rules"] == "agentx" and v["valid"] is False
    assert "unsafe_override" in v["reasons"]
    overridden = " ".join(v["details"])
    for key in ("limits.duration_s", "timing.time_scale", "trace.transform.max_context_tokens",
                "trace.transform.scale"):
        assert key in overridden
    r = s["overall"]["requests"]
    assert r["ok"] > 0 and r["context_overflow"] == 0
    assert s["agentx"] and s["agentx"][0]["total_tok_s_per_gpu"] > 0
