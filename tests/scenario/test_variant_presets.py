"""A variant's preset file is found relative to the scenario's folder, as the base's is
(it was looked up relative to the working folder)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentbench.errors import InputError
from agentbench.scenario.loading import expand_variants, load_scenario
from tests.helpers import ROOT

BASE = """
name: v
endpoints: [{kind: simulated}]
trace: {kind: synth, profile: codex, sessions: 2}
load: {kind: lanes, concurrency: 1}
limits: {max_requests: 2}
variants:
  - name: own
    set:
      endpoints.0.preset: presets/p.yaml
  - name: pools
    set:
      endpoints.0.disaggregation:
        prefill: {instances: 1, preset: presets/p.yaml}
        decode: {instances: 1}
"""


def test_a_variants_preset_file_is_relative_to_the_scenario(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    (tmp_path / "presets").mkdir()
    preset = tmp_path / "presets" / "p.yaml"
    shutil.copy(ROOT / "agentbench" / "sim" / "preset_files" / "h200-gpt-oss-120b-all-full.yaml",
                preset)
    (tmp_path / "s.yaml").write_text(BASE)
    monkeypatch.chdir(ROOT)  # anywhere but the scenario's folder
    own, pools = expand_variants(load_scenario(tmp_path / "s.yaml"))
    assert own.endpoints[0].preset == str(preset.resolve())
    assert pools.endpoints[0].disaggregation.prefill.preset == str(preset.resolve())
    (tmp_path / "s.yaml").write_text(BASE.replace("presets/p.yaml", "presets/none.yaml"))
    with pytest.raises(InputError, match="variants.0.set -> endpoints.0.preset: no such "
                                         "preset file: presets/none.yaml"):
        load_scenario(tmp_path / "s.yaml")
