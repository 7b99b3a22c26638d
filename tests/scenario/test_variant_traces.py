"""A variant's own trace is checked before the sweep, as the base's is: its file found
relative to the scenario's folder, its synth profile known. The file was looked for from
the working folder and neither was checked, so ``validate`` said ok and ``run`` stopped
at that variant (exit 2) after the variants before it had run."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbench.errors import InputError
from agentbench.scenario.loading import expand_variants, load_scenario
from agentbench.traces.readers import native
from agentbench.traces.synth import synthesize
from tests.helpers import ROOT

BASE = """
name: v
endpoints: [{kind: simulated}]
trace: {kind: synth, profile: codex, sessions: 2}
load: {kind: lanes, concurrency: 1}
limits: {max_requests: 2}
variants:
  - name: base
  - name: dotted
    set:
      trace.profile: PROFILE
  - name: file
    set:
      trace: {kind: file, source: SOURCE}
"""


def _scenario(folder: Path, profile: str = "agentx", source: str = "data/t.parquet") -> Path:
    (folder / "s.yaml").write_text(BASE.replace("PROFILE", profile).replace("SOURCE", source))
    return folder / "s.yaml"


def test_a_variants_trace_file_is_relative_to_the_scenario(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    (tmp_path / "data").mkdir()
    trace = native.write(synthesize("codex", 2, 0), tmp_path / "data" / "t.parquet")
    monkeypatch.chdir(ROOT)  # anywhere but the scenario's folder
    base, dotted, file = expand_variants(load_scenario(_scenario(tmp_path)))
    assert file.trace.source == str(trace.resolve())
    assert (base.trace.profile, dotted.trace.profile) == ("codex", "agentx")


@pytest.mark.parametrize(("profile", "source", "says"), [
    ("codx", "data/t.parquet", "variants.1.set -> trace.profile: unknown synth profile "
                               "'codx' (known: agentx, codex"),
    ("agentx", "data/none.parquet", "variants.2.set -> trace.source: no such file or "
                                    "folder: data/none.parquet (relative paths are "
                                    "relative to the scenario's folder"),
    ("p/none.yaml", "data/t.parquet", "variants.1.set -> trace.profile: no such profile "
                                      "file: p/none.yaml")])
def test_a_variants_trace_that_cannot_be_read_is_refused_before_the_sweep(
        tmp_path: Path, profile: str, source: str, says: str) -> None:
    (tmp_path / "data").mkdir()
    native.write(synthesize("codex", 2, 0), tmp_path / "data" / "t.parquet")
    with pytest.raises(InputError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load_scenario(_scenario(tmp_path, profile, source))


def test_the_bases_synth_profile_is_known_or_a_file(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown profile passed ``validate``; a profile file is relative to the
    scenario's folder, as a trace file is."""
    text = BASE.split("variants:")[0]
    (tmp_path / "s.yaml").write_text(text.replace("profile: codex", "profile: codx"))
    with pytest.raises(InputError, match="trace.profile: unknown synth profile 'codx'"):
        load_scenario(tmp_path / "s.yaml")
    (tmp_path / "p.yaml").write_bytes(
        (ROOT / "agentbench" / "traces" / "synth" / "profiles" / "codex.yaml").read_bytes())
    (tmp_path / "s.yaml").write_text(text.replace("profile: codex", "profile: p.yaml"))
    monkeypatch.chdir(ROOT)
    sc = load_scenario(tmp_path / "s.yaml")
    assert sc.trace.profile == str((tmp_path / "p.yaml").resolve())


@pytest.mark.parametrize(("trace", "says"), [
    ("{kind: file, source: data/t.parquet, format: wekaa}",
     "trace.format: unknown trace format 'wekaa' (known: weka, mooncake"),
    ("{kind: file, source: 'builtin:claude-code-weka', format: weka}",
     "trace.source: builtin:claude-code-weka is a native parquet trace; drop format 'weka'")])
def test_a_trace_format_the_run_refuses_is_refused_by_validate(tmp_path: Path, trace: str,
                                                               says: str) -> None:
    """A format name no reader has (a typo), or one given to a bundled trace: validate
    said ok and the run refused it, in a sweep at the variant that set it."""
    (tmp_path / "data").mkdir()
    native.write(synthesize("codex", 2, 0), tmp_path / "data" / "t.parquet")
    text = BASE.split("variants:")[0]
    (tmp_path / "s.yaml").write_text(text.replace(
        "{kind: synth, profile: codex, sessions: 2}", trace))
    with pytest.raises(InputError, match=says.replace("(", r"\(")):
        load_scenario(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text(BASE.replace("PROFILE", "agentx").replace(
        "trace: {kind: file, source: SOURCE}", f"trace: {trace}"))
    with pytest.raises(InputError, match="variants.2.set -> " + says.replace("(", r"\(")):
        load_scenario(tmp_path / "s.yaml")
