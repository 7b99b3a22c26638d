"""Simulator presets as YAML files (``agentbench/sim/presetfile.py``): the shipped files
hold the figures the presets always had, a preset file round-trips, a bad one is one
error line naming its key, and a scenario whose simulated endpoint names a file runs."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentbench.errors import InputError
from agentbench.replay import run
from agentbench.scenario.loading import load_scenario
from agentbench.scenario.model import Scenario
from agentbench.sim.presetfile import load_preset_file, parse_preset, preset_yaml
from agentbench.sim.presets import (
    BUILTIN,
    FIGURES,
    OPTIONAL,
    PRESET_DIR,
    PRESETS,
    get_preset,
)

_L70 = 2 * 80 * 8 * 128 * 1  # Llama-3-70B FP8 KV bytes per token (an int)
_L8 = 2 * 32 * 8 * 128 * 1
#: the presets' figures as they were written in Python before they became files
REFERENCE: dict[str, dict[str, object]] = {
    "h200-llama3-70b": dict(
        params=70.6e9, layers=80, hidden=8192, kv_bytes_per_token=_L70, weight_bytes=70.6e9,
        peak_flops=1979e12, mfu=0.55, hbm_bytes_per_s=4.8e12, mbu=0.75, hbm_bytes=141e9,
        gpu_memory_utilization=0.9, activation_reserve_bytes=5e9, step_overhead_s=0.002,
        max_num_batched_tokens=8192, max_num_seqs=256, cpu_load_s_per_token=_L70 / 50e9,
        shared_load_s_per_token=_L70 / 25e9, natural_output_tokens=300),
    "h100-llama3-8b": dict(
        params=8.03e9, layers=32, hidden=4096, kv_bytes_per_token=_L8, weight_bytes=8.03e9,
        peak_flops=1979e12, mfu=0.45, hbm_bytes_per_s=3.35e12, mbu=0.7, hbm_bytes=80e9,
        gpu_memory_utilization=0.9, activation_reserve_bytes=3e9, step_overhead_s=0.002,
        max_num_batched_tokens=8192, max_num_seqs=256, cpu_load_s_per_token=_L8 / 50e9,
        shared_load_s_per_token=_L8 / 25e9, natural_output_tokens=300),
    "instant": dict(
        params=1e9, layers=1, hidden=1, kv_bytes_per_token=1.0, weight_bytes=0.0,
        peak_flops=math.inf, mfu=1.0, hbm_bytes_per_s=math.inf, mbu=1.0, hbm_bytes=4e6,
        gpu_memory_utilization=1.0, activation_reserve_bytes=0.0, step_overhead_s=0.0,
        max_num_batched_tokens=1 << 20, max_num_seqs=1024, cpu_load_s_per_token=0.0,
        shared_load_s_per_token=0.0, natural_output_tokens=64),
}


@pytest.mark.parametrize("name", list(REFERENCE))
def test_shipped_files_hold_the_presets_figures(name: str) -> None:
    """Same values and types (an integer KV size keeps the step times' integer
    arithmetic), every figure with a source, provenance printed by ``describe``."""
    p = load_preset_file(PRESET_DIR / f"{name}.yaml")
    assert p == PRESETS[name] and p.name == name
    for k, v in REFERENCE[name].items():
        got = getattr(p, k)
        assert got == v and type(got) is type(v), (k, got, v)
    assert {f.name for f in fields(p)} == {"name", "summary", "provenance", *FIGURES,
                                           "step_fit", "fit_summary", "scheduler", "gpus"}
    assert p.gpus == (0 if name == "instant" else 1)  # GPUs one instance runs on
    # a roofline preset: every figure but the engine-reported capacity, no fit
    assert [k for k, _ in p.provenance.figures] == [f for f in FIGURES
                                                    if f not in OPTIONAL]
    assert p.step_fit is None and p.kv_capacity_tokens is None and p.scheduler == "paged"
    assert all(src for _, src in p.provenance.figures)
    prov = p.provenance
    assert prov.engine and prov.model and prov.hardware and prov.sources and prov.notes
    assert prov.date == "2026-11-29"
    text = p.describe()
    assert prov.notes[0] in text and prov.sources[0] in text and prov.hardware in text


@pytest.mark.parametrize(("name", "gpus", "moe", "windows"), [
    ("h200x8-deepseek-v3", 8, True, False), ("gb200x8-deepseek-v3", 8, True, False),
    ("h200-gpt-oss-120b", 1, True, True), ("gb200-gpt-oss-120b", 1, True, True)])
def test_the_moe_and_hybrid_presets_source_every_figure(name: str, gpus: int, moe: bool,
                                                       windows: bool) -> None:
    p = load_preset_file(PRESET_DIR / f"{name}.yaml")
    assert p == PRESETS[name] and p.gpus == gpus and p.scheduler == "paged"
    given = [k for k, _ in p.provenance.figures]
    required = [f for f in FIGURES if f not in OPTIONAL]
    assert given[:len(required)] == required and all(src for _, src in p.provenance.figures)
    assert ("routed_experts" in given) == moe and ("sequence_kv_bytes" in given) == windows
    assert p.expert_weight_bytes < p.weight_bytes and p.experts_per_token < p.routed_experts
    prov = p.provenance
    assert prov.engine and prov.model and prov.hardware and prov.sources and prov.notes
    assert prov.sources[0] in p.describe()


def test_the_folder_holds_the_shipped_presets() -> None:
    assert sorted(f.stem for f in PRESET_DIR.glob("*.yaml")) == sorted(BUILTIN)
    assert list(PRESETS) == list(BUILTIN)
    assert "TensorRT-LLM" in PRESETS["h200-llama3-70b"].describe()


@pytest.mark.parametrize("name", BUILTIN)
def test_a_preset_round_trips_through_its_yaml(name: str, tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(preset_yaml(PRESETS[name]))
    assert load_preset_file(f) == PRESETS[name]
    assert get_preset(str(f)) == PRESETS[name]


def test_overrides_are_recorded_as_the_figures_source() -> None:
    p = get_preset("h100-llama3-8b", max_num_seqs=64, max_num_batched_tokens=None)
    assert p.max_num_seqs == 64 and p.max_num_batched_tokens == 8192
    assert p.provenance.source_of("max_num_seqs") == "set by the endpoint's max_num_seqs"
    assert p.provenance.source_of("mfu") == PRESETS["h100-llama3-8b"].provenance \
        .source_of("mfu")


def _text(**edits: str) -> str:
    """The shipped h100 file with lines replaced (``old line=new line``)."""
    text = (PRESET_DIR / "h100-llama3-8b.yaml").read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new, 1)
    return text


BAD = [  # (file text, the key the error names, words of the message)
    (_text(**{"name: h100-llama3-8b": "name: h100-llama3-8b\nflops: 3"}), "flops",
     "unknown key"),
    (_text(**{"    value: 0.45\n": "    value: 0.45\n    vaule: 0.5\n"}), "figures.mfu.vaule",
     "unknown key"),
    (_text(**{"value: 3.35e+12": "value: -3.35e+12"}), "figures.hbm_bytes_per_s.value",
     "greater than 0"),
    (_text(**{"value: 3.35e+12": "value: .nan"}), "figures.hbm_bytes_per_s.value", "NaN"),
    (_text(**{"value: 0.45": "value: .nan"}), "figures.mfu.value", "NaN"),
    (_text(**{"value: 3.35e+12": "value: 3.35e12"}), "figures.hbm_bytes_per_s.value",
     "1.0e+3 as a number"),
    (_text(**{"value: 0.45": "value: 1.5"}), "figures.mfu.value", "less than or equal to 1"),
    (_text(**{"value: 0.45": "value: .inf"}), "figures.mfu.value", "finite"),
    (_text(**{"value: 32\n": "value: 32.5\n"}), "figures.layers.value", "integer"),
    (_text(**{"  layers:\n    value: 32\n    source: Llama-3.1-8B config.json "
              "(num_hidden_layers)\n": ""}), "figures.layers", "missing"),
    (_text(**{"    source: \"assumption\"\n": "    source: \"\"\n"}), "figures.mbu.source",
     "at least 1 character"),
    (_text(**{"  mbu:\n    value: 0.7": "  mbu: 0.7\n  xx:\n    value: 0.7"}), "figures.mbu",
     "must be a mapping"),
    (_text(**{"date: 2026-11-29": "date: yesterday"}), "provenance.date", "date"),
]


@pytest.mark.parametrize("text,key,words", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_a_bad_preset_file_is_one_line_naming_the_key(text: str, key: str, words: str,
                                                      tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_preset_file(f)
    line = e.value.one_line()
    assert "\n" not in line and str(f) in line and f"'{key}'" in line and words in line, line
    assert ":line " in line  # where in the file


@pytest.mark.parametrize("content,words", [
    (None, "cannot read preset file (No such file or directory)"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a text (UTF-8) file"),
    (b"name: x\x00\n", "NUL bytes"),
    (b"- a list\n", "a preset file is a YAML mapping"),
    (b"name: [unclosed\n", "(yaml)"),
    (b"", "a preset file is a YAML mapping"),
])
def test_an_unreadable_preset_file_is_one_line(content: bytes | None, words: str,
                                               tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    if content is not None:
        f.write_bytes(content)
    with pytest.raises(InputError) as e:
        load_preset_file(f)
    line = e.value.one_line()
    assert "\n" not in line and str(f) in line and words in line, line
    with pytest.raises(InputError):
        get_preset(str(f))


def _scenario_file(folder: Path, preset: str) -> Path:
    f = folder / "sc.yaml"
    f.write_text("name: p\nendpoints:\n  - kind: simulated\n    preset: " + preset + "\n"
                 "trace: {kind: synth, profile: agentx, sessions: 2}\n"
                 "load: {kind: lanes, concurrency: 2}\n"
                 "limits: {max_sessions: 2, recycle: false}\n")
    return f


def test_preset_references_in_a_scenario(tmp_path: Path) -> None:
    """A shipped name as it is; a relative file path against the scenario's folder (not
    the working folder); a missing file: one line naming the key; an unknown name: the
    known names when the simulator starts."""
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "mine.yaml").write_text(preset_yaml(PRESETS["instant"]))
    assert load_scenario(_scenario_file(tmp_path, "instant")).endpoints[0].preset == "instant"
    sc = load_scenario(_scenario_file(tmp_path, "presets/mine.yaml"))
    ref = sc.endpoints[0].preset
    assert ref == str((tmp_path / "presets" / "mine.yaml").resolve())
    assert get_preset(ref) == PRESETS["instant"]
    with pytest.raises(InputError) as e:
        load_scenario(_scenario_file(tmp_path, "presets/none.yaml"))
    line = e.value.one_line()
    assert "endpoints.0.preset" in line and "no such preset file: presets/none.yaml" in line
    with pytest.raises(KeyError, match="h300.*instant"):
        get_preset("h300")
    assert parse_preset(preset_yaml(PRESETS["h200-llama3-70b"])) == PRESETS["h200-llama3-70b"]


def _virtual_run(out: Path, rid: str, preset: str, agents: int = 2,
                 max_context: int = 20000, time_scale: float = 0.1,
                 profile: str = "agentx") -> Path:
    """``agents`` synthetic agents, one lane each, on one simulated instance in virtual
    time (about a second)."""
    sc = Scenario.model_validate({
        "name": "preset-file", "seed": 0, "clock": "virtual",
        "endpoints": [{"kind": "simulated", "name": "sim", "preset": preset}],
        "trace": {"kind": "synth", "profile": profile, "sessions": agents,
                  "transform": {"max_context_tokens": max_context}},
        "load": {"kind": "lanes", "concurrency": agents},
        "timing": {"time_scale": time_scale},
        "limits": {"max_sessions": agents, "recycle": False},
        "output": {"dir": str(out), "run_id": rid},
        "server_metrics": {"enabled": False},
    })
    return run(sc, progress=False).run_dir


def test_a_scenario_naming_a_preset_file_runs(tmp_path: Path) -> None:
    """The h100 preset from a copy of its file gives the built-in's records; the same file
    with half the achieved FLOP/s gives later first tokens."""
    same = tmp_path / "h100-copy.yaml"
    same.write_text((PRESET_DIR / "h100-llama3-8b.yaml").read_text())
    slow = tmp_path / "h100-slow.yaml"
    slow.write_text(_text(**{"value: 0.45": "value: 0.225"}))
    runs = {rid: pq.read_table(_virtual_run(tmp_path / "out", rid, ref) / "requests.parquet")
            for rid, ref in (("named", "h100-llama3-8b"), ("file", str(same)),
                             ("slow", str(slow)))}
    named, file, slowed = runs["named"], runs["file"], runs["slow"]
    assert named.num_rows > 5 and set(named.column("status").to_pylist()) == {"ok"}
    assert file.equals(named)

    assert _ttft_sum(slowed) > _ttft_sum(named) > 0


def _ttft_sum(t: pa.Table) -> int:
    """Time to first token summed over a run's requests (simulated ns)."""
    first, sent = t.column("first_token_ns").to_pylist(), t.column("sent_ns").to_pylist()
    return sum(f - s for f, s in zip(first, sent, strict=True))


def test_a_bad_preset_file_stops_validate_and_run_before_any_run_folder(
        tmp_path: Path) -> None:
    """A preset file that exists but cannot be read as one: ``validate`` and ``run`` each
    say so in one line (exit 2), and no run folder is made."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "mine.yaml").write_bytes(b"\x00\x01 not yaml")
    f = _scenario_file(tmp_path, "presets/mine.yaml")
    out = tmp_path / "out"
    for args in (["validate", str(f)], ["run", str(f), "-o", str(out)]):
        res = CliRunner().invoke(app, args)
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert "endpoints[0]" in lines[0] and "NUL bytes" in lines[0], lines[0]
    assert not out.exists()
