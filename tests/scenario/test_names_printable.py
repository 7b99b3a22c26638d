"""Names that reach the terminal, file names and reports: a scenario's name or a preset's
text holding control characters is refused in one line (an escape sequence recoloured,
retitled or cleared the terminal; a line break split the header), and a name's file form
stays one plain file name inside the folder asked (``../../x`` wrote two folders up)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.experiment.search import search
from agentbench.results.rundir import MAX_NAME, safe_name
from agentbench.scenario.loading import parse_scenario
from agentbench.sim.presetfile import load_preset_file, preset_yaml
from tests.helpers import ROOT

BASE = ("endpoints: [{kind: simulated, preset: instant}]\n"
        "trace: {kind: synth, profile: codex, sessions: 1}\n"
        "load: {kind: lanes, concurrency: 1}\n")


@pytest.mark.parametrize("name", ["q\x1b[31mRED", "a\nb", "a\rX", "tab\there", "\x9bc",
                                  "line\u2028sep", "\u202egnp.exe"])
def test_a_scenario_name_with_a_control_character_is_one_line(name: str) -> None:
    with pytest.raises(InputError) as e:
        parse_scenario(f"name: {json.dumps(name)}\n" + BASE)
    assert "name" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("name", "file"), [
    ("../../escaped", "escaped"), ("/tmp/anywhere/deep", "tmp-anywhere-deep"),
    (".hidden", "hidden"), ("--x", "x"), ("..", "run"), ("my run", "my-run"),
    ("é" * 50, "é" * 50),
])
def test_a_name_as_a_file_name_is_one_plain_name(name: str, file: str) -> None:
    assert safe_name(name) == file
    assert len(safe_name(name).encode()) <= MAX_NAME


@pytest.mark.parametrize("base", ["b" * 125, "é" * 200, "x" * 1000])
def test_a_long_name_is_cut_in_its_middle_keeping_each_suffix(base: str) -> None:
    """Cut at its end, two variants' folders had one name (``-gpu`` and ``-cpu`` lost)."""
    names = {safe_name(f"{base}-{suffix}") for suffix in ("gpu", "cpu", "search-c12",
                                                           "rep01")}
    assert len(names) == 4
    for n in names:
        assert len(n.encode()) <= MAX_NAME and n.startswith(base[:10]) and "--" in n


def test_a_long_name_runs_with_repeats_and_variants(tmp_path: Path) -> None:
    """A 199-character name made ``--repeat`` and ``search`` crash (a length bound on the
    name, which they extend), and lost the variants' suffixes in their folders."""
    import yaml

    from agentbench.scenario.loading import expand_variants

    doc = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    doc.update(name="n" * 199, variants=[{"name": "gpu"}, {"name": "cpu"}])
    f = tmp_path / "long.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(app, ["run", str(f), "-o", str(tmp_path / "out"), "--repeat", "2",
                                 "--set", "limits.max_requests=3", "--no-progress"])
    assert r.exit_code == 0, r.output
    folders = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(folders) == 4, folders
    for v in ("gpu", "cpu"):
        for k in (1, 2):
            assert sum(f"-{v}-rep0{k}-" in f for f in folders) == 1, folders
    assert len(expand_variants(parse_scenario(f.read_text()))) == 2


def test_search_writes_inside_its_output_whatever_the_name(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    r = CliRunner().invoke(app, [
        "search", str(ROOT / "scenarios" / "quickstart.yaml"), "--lanes", "1:1", "-o", "out",
        "--set", "name=../../escaped", "--set", "limits.max_requests=4"])
    assert r.exit_code == 0, r.output
    assert (work / "out" / "escaped-search.json").is_file()
    assert sorted(p.name for p in tmp_path.rglob("*-search.json")) == ["escaped-search.json"]


def _rate_scenario() -> Any:
    return parse_scenario("name: r\nendpoints: [{kind: simulated, preset: instant}]\n"
                          "trace: {kind: synth, profile: codex, sessions: 1}\n"
                          "load: {kind: rate, arrival: poisson, rate_per_s: 0.01}\n"
                          "limits: {max_requests: 4}\n"
                          "slos: {ttft_ms: 100}\n")


@pytest.mark.parametrize(("lo", "hi", "says"), [
    (1e-9, 2e-9, "at least 1e-06"), (1e-9, 0.01, "at least 1e-06"),
    (1, 1e300, "out of range"), (1, 2e9, "out of range"),
])
def test_a_rate_range_past_a_scenarios_bounds_is_one_line_before_any_probe(
        lo: float, hi: float, says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbench.experiment import run as run_mod

    monkeypatch.setattr(run_mod, "run_variant", lambda *a, **k: pytest.fail("probed"))
    with pytest.raises(InputError, match=says) as e:
        search(_rate_scenario(), lo=lo, hi=hi)
    assert e.value.one_line().count("\n") == 0 and "--rate" in e.value.one_line()


def test_a_preset_text_with_an_escape_sequence_is_refused(tmp_path: Path) -> None:
    from agentbench.sim.presets import get_preset

    text = preset_yaml(get_preset("h200-llama3-70b"))
    f = tmp_path / "evil.yaml"
    f.write_text(_with_model(text, "\x1b]0;pwned\x07\x1b[2J"))  # retitles, clears
    with pytest.raises(InputError, match="one line of printable text"):
        load_preset_file(f)
    r = CliRunner().invoke(app, ["sim", "fit", str(tmp_path), "-o", str(tmp_path / "p.yaml"),
                                 "--model", "\x1b[2J"])
    assert r.exit_code == 2 and "field '--model': must be one line" in r.output, r.output


def _with_model(text: str, model: str) -> str:
    import yaml

    doc = yaml.safe_load(text)
    doc["provenance"]["model"] = model
    return yaml.safe_dump(doc)


@pytest.mark.parametrize("key", ["name", "model"])
@pytest.mark.parametrize("kind", ["simulated", "openai"])
def test_an_endpoint_label_or_model_with_a_control_character_is_one_line(key: str,
                                                                         kind: str) -> None:
    ep = {"kind": kind, key: "a\x1b[2Jb"}
    if kind == "openai":
        ep = {"url": "http://127.0.0.1:9", "model": "m", **ep}
    text = (f"name: x\nendpoints: [{json.dumps(ep)}]\n"
            "trace: {kind: synth, profile: codex, sessions: 1}\n"
            "load: {kind: lanes, concurrency: 1}\n")
    with pytest.raises(InputError, match="one line of printable text") as e:
        parse_scenario(text)
    assert f"endpoints.0.{key}" in str(e.value)
