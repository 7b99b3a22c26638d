"""``agentbench sim fit``: the step model fitted to runs. A simulator running a known fitted
preset is the one engine whose truth is known here, so the fit is checked against it: fitted
on one run, the preset predicts another (other agents, other concurrency) within the
targets docs/simulator.md sets for real engines. Real engines: tests/integration."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.experiment.enginefacts import engine_facts
from agentbench.experiment.fitpreset import fitted_preset, save_warning
from agentbench.experiment.simcheck import sim_check
from agentbench.experiment.simfit import fit_runs, format_fit
from agentbench.replay import run
from agentbench.scenario.model import Scenario
from agentbench.sim.cost import STEP_FIT_TERMS
from agentbench.sim.presetfile import load_preset_file, parse_preset, preset_yaml
from tests.helpers import ROOT, serve_sim
from tests.sim.test_fitted_preset import FIT, TEXT

TRUE = TEXT.replace("value: 24576", "value: 4000000")


def _run(out: Path, rid: str, preset: Path, sessions: int, lanes: int, seed: int,
         instances: int = 1) -> Path:
    sc = Scenario.model_validate({
        "name": rid, "seed": seed, "clock": "virtual",
        "endpoints": [{"kind": "simulated", "name": "sim", "preset": str(preset),
                       "instances": instances}],
        "trace": {"kind": "synth", "profile": "agentx", "sessions": sessions,
                  "transform": {"max_context_tokens": 20000}},
        "load": {"kind": "lanes", "concurrency": lanes},
        "timing": {"time_scale": 0.1},
        "limits": {"max_sessions": sessions, "recycle": False},
        "output": {"dir": str(out), "run_id": rid},
        "server_metrics": {"enabled": False},
    })
    return run(sc, progress=False).run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fit")
    truth = tmp / "truth.yaml"
    truth.write_text(TRUE)
    return {"truth": truth,
            # three agents: batches varied enough to tell the decode term from the
            # attention term (two agents of the 256K agentx profile leave them 15% apart)
            "fit": _run(tmp / "r", "fit", truth, sessions=3, lanes=3, seed=0),
            "held": _run(tmp / "r", "held", truth, sessions=4, lanes=4, seed=7)}


def test_a_fit_predicts_held_out_work_of_the_engine_it_came_from(runs: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    fit = fit_runs([runs["fit"]])
    assert fit.observations > 100 and set(fit.coef) >= {"intercept_s", "kv_token_s"}
    assert fit.residuals["decode_median"] < 0.01 and fit.residuals["ttft_p90"] < 0.01
    # the windows are exact on a simulator: the fit finds the coefficients it ran with
    true = dict(zip(STEP_FIT_TERMS, FIT.values(), strict=True))
    for k, v in true.items():
        assert fit.coef[k] == pytest.approx(v, rel=0.1, abs=1e-5), (k, fit.coef[k], v)
    preset = fitted_preset(fit, name="fitted", kv_capacity_tokens=4_000_000,
                           max_num_seqs=4, max_num_batched_tokens=2048)
    path = tmp_path / "fitted.yaml"
    path.write_text(preset_yaml(preset))
    assert load_preset_file(path).step_fit == preset.step_fit
    check = sim_check(runs["held"], str(path), out=tmp_path / "check")
    errors = {r.metric: r.error for r in check.rows}
    assert abs(errors["e2e_p50"]) < 0.15 and abs(errors["itl_p50"]) < 0.15, errors
    assert abs(errors["throughput"]) < 0.15 and abs(errors["ttft_p50"]) < 0.20, errors
    assert abs(errors["hit_rate"]) < 2.0, errors
    pr = check.per_request  # request by request, matched on session, copy and turn
    assert pr["matched"] == check.row("requests_ok").measured > 20
    assert pr["ttft_median"] < 0.2 and pr["e2e_median"] < 0.15 and \
        pr["cached_share_p90_pt"] < 2.0, pr
    # and a preset fitted to nothing like it does not: the check can fail
    slow = tmp_path / "slow.yaml"
    slow.write_text(TRUE.replace("decode_token_s: {value: 3.0e-4",
                                 "decode_token_s: {value: 3.0e-3"))
    bad = sim_check(runs["held"], str(slow), out=tmp_path / "bad")
    assert bad.row("itl_p50").error > 0.3


def test_engine_facts_come_from_the_server_command_and_metrics() -> None:
    llama = engine_facts({"server": {"command": "python -m agentbench.engines llama-server "
                                     "--tiny 512x8 -- -c 24576 -np 4 -t 2"}}, None)
    assert (llama.family, llama.kv_capacity_tokens, llama.max_num_seqs,
            llama.max_num_batched_tokens, llama.block_size) == ("llama.cpp", 24576, 4, 2048, 1)
    import pandas as pd

    sm = pd.DataFrame({"name": ["vllm:cache_config_info"],
                       "labels": ["block_size=32,num_gpu_blocks=4096,engine=0"]})
    vllm = engine_facts({"server": {"command": ["vllm", "serve", "m", "--max-num-seqs",
                                                "8", "--max-num-batched-tokens=512"]}}, sm)
    assert (vllm.family, vllm.kv_capacity_tokens, vllm.block_size, vllm.max_num_seqs,
            vllm.max_num_batched_tokens) == ("vllm", 131072, 32, 8, 512)
    assert "cache_config_info" in vllm.sources["kv_capacity_tokens"]
    none = engine_facts({"endpoints": [{"kind": "openai"}]}, None)
    assert none.kv_capacity_tokens is None and none.family == "openai"
    assert none.max_context_tokens is None


def test_the_engines_context_window_comes_from_its_command() -> None:
    """The window each engine refuses a longer prompt beyond: a llama.cpp slot's share of
    -c (the whole -c when the slots share one buffer), vLLM's --max-model-len; unsaid
    (vLLM's default is the model's own), no window."""
    def window(cmd: str) -> int | None:
        return engine_facts({"server": {"command": cmd}}, None).max_context_tokens

    llama = "python -m agentbench.engines llama-server -- -c 24576 -np 4 -t 2"
    assert window(llama) == 6144
    assert window(llama + " -kvu") == window(llama + " --kv-unified") == 24576
    # without -np: llama-server's 4 slots share -c (measured: n_ctx_slot = -c, kv_unified)
    assert window("llama-server -c 8192") == window("llama-server -c 8192 -np -1") == 8192
    assert window("llama-server -c 8192 -no-kvu") == 2048
    assert engine_facts({"server": {"command": "llama-server -c 8192"}}, None).max_num_seqs == 4
    assert window("vllm serve m --max-model-len 4096") == 4096
    assert window("vllm serve m --max-model-len=2048") == 2048
    assert window("vllm serve m") is None
    # vLLM's human-readable integers: k decimal, K binary; auto (or -1) is the model's own
    assert window("vllm serve m --max-model-len=4k") == 4000
    assert window("vllm serve m --max-model-len 4K") == 4096
    assert window("vllm serve m --max-model-len 25.6k") == 25600
    for unknown in ("auto", "-1", "1.5K", "4x"):
        assert window(f"vllm serve m --max-model-len {unknown}") is None, unknown
    assert engine_facts({"server": {"command": "vllm serve m --max-num-batched-tokens 8K"}},
                        None).max_num_batched_tokens == 8192


def test_a_fitted_preset_refuses_what_its_engine_refused(runs: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """The context window goes from the engine's facts into the preset (in the
    simulator's tokens) and its file, and the simulator treats a longer request as the
    engine does; a simulated endpoint's own window takes precedence."""
    from agentbench.scenario.endpoints import SimulatedEndpoint
    from agentbench.sim.cluster import Cluster, SimRejected

    fit = fit_runs([runs["fit"]])
    # the engine counted 2.1 of its tokens per simulator token in the median, 2.0 on the
    # longest prompts: the window is converted at the latter, so that a long prompt the
    # engine served is not refused
    fit.facts.max_context_tokens, fit.facts.token_ratio = 50_000, 2.1
    fit.facts.long_prompt_ratio = 2.0
    fit.facts.sources["max_context_tokens"] = "the server command's --max-model-len"
    preset = fitted_preset(fit, name="windowed", kv_capacity_tokens=4_000_000)
    assert preset.max_context_tokens == 25_000  # 50,000 of the engine's tokens, 2 per ours
    assert preset.kv_capacity_tokens == round(4_000_000 / 2.1)  # at the median ratio
    assert "--max-model-len" in preset.provenance.source_of("max_context_tokens")
    path = tmp_path / "windowed.yaml"
    path.write_text(preset_yaml(preset))
    assert load_preset_file(path).max_context_tokens == 25_000

    def refused(n: int, **endpoint: object) -> str | None:
        cl = Cluster(SimulatedEndpoint.model_validate(
            {"kind": "simulated", "preset": str(path), **endpoint}))
        req = cl.make_hashed([], n, max_tokens=48, ignore_eos=True)
        try:
            cl.submit(req)
        except SimRejected as e:
            return str(e)
        out.append((req.output_tokens, req.finish_as))
        return None

    out: list[tuple[int, str]] = []
    assert refused(24_952) is None  # 24,952 + 48 output tokens: the whole window
    # as the engine (vLLM 0.32, llama.cpp): an output past the window is cut there, and a
    # prompt that leaves no room for one output token is refused
    assert refused(24_990) is None and out[-1] == (10, "length")
    assert refused(24_999) is None and out[-1] == (1, "length")
    why = refused(25_000) or ""
    assert "maximum context length is 25000 tokens" in why
    assert "your prompt contains 25000 input tokens" in why
    assert refused(25_000, max_context_tokens=80_000) is None and out[-1] == (48, "length")
    # an endpoint's own window follows the OpenAI API: prompt plus output within it
    assert "you requested 25001 tokens (24953 in the messages, 48 in the completion)" in (
        refused(24_953, max_context_tokens=25_000) or "")
    # a preset without a window refuses nothing on length
    assert load_preset_file(runs["truth"]).max_context_tokens is None


def test_cli_writes_a_preset_and_keeps_an_existing_one(runs: dict[str, Path],
                                                       tmp_path: Path) -> None:
    out = tmp_path / "engine.yaml"
    args = ["sim", "fit", str(runs["fit"]), "-o", str(out), "--kv-capacity-tokens",
            "100000", "--engine", "test-engine", "--model", "m", "--hardware", "h"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "intercept_s" in res.output and "residuals" in res.output
    p = parse_preset(out.read_text())
    assert p.name == "engine" and p.provenance.engine == "test-engine"
    assert p.kv_capacity_tokens == 100000 and p.step_fit is not None
    assert p.fit_summary and p.fit_summary["inputs"] == [str(runs["fit"])]
    before = out.read_text()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "exists" in again.output and out.read_text() == before
    assert CliRunner().invoke(app, [*args, "--force", "--name", "x"]).exit_code == 0
    assert parse_preset(out.read_text()).name == "x"


def test_out_in_a_folder_not_made_yet_is_written_as_the_docs_show(runs: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    """docs/simulator.md's `sim fit ... -o presets/my-engine.yaml`, where no presets/ is:
    the folder is made, as `run -o` and `search -o` make theirs (it was "cannot write (No
    such file or directory)", exit 2, after the fit, and after --endpoint's minutes of
    profiling)."""
    out = tmp_path / "presets" / "my-engine.yaml"
    res = CliRunner().invoke(app, ["sim", "fit", str(runs["fit"]), "-o", str(out),
                                   "--kv-capacity-tokens", "100000"])
    assert res.exit_code == 0, res.output
    assert parse_preset(out.read_text()).name == "my-engine"


def test_without_a_capacity_the_fit_says_which_option_gives_it(runs: dict[str, Path],
                                                              tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["sim", "fit", str(runs["fit"]), "-o",
                                   str(tmp_path / "p.yaml")])
    assert res.exit_code == 2 and "--kv-capacity-tokens" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "p.yaml").exists()


def test_a_run_spread_over_several_engines_is_fitted_with_a_warning(
        runs: dict[str, Path], tmp_path: Path) -> None:
    """The fit adds up every request in flight as one engine's steps: a run over two
    instances (or endpoints) gives step times too short without a word, and a check of
    that preset then predicted TTFT far below what was measured."""
    assert fit_runs([runs["fit"]]).warnings == []
    two = _run(tmp_path, "two", runs["truth"], sessions=3, lanes=3, seed=0, instances=2)
    fit = fit_runs([runs["fit"], two])
    assert len(fit.warnings) == 1 and "two: its requests went to 2 engines" in \
        fit.warnings[0], fit.warnings
    assert f"  warning: {fit.warnings[0]}" in format_fit(fit).splitlines()
    res = CliRunner().invoke(app, ["sim", "fit", str(two), "-o", str(tmp_path / "p.yaml"),
                                   "--kv-capacity-tokens", "100000"])
    assert res.exit_code == 0 and "went to 2 engines" in res.output, res.output
    # endpoints count one engine each (a router's back ends cannot be seen); P/D pools
    # are the endpoint's instances, their sum
    eps = [{"kind": "openai", "name": "a"}, {"kind": "openai", "name": "b"},
           {"kind": "simulated", "instances": 3}, {"kind": "simulated", "instances": "x"}]
    assert engine_facts({"endpoints": eps}, None).engines == 6
    assert engine_facts({}, None).engines == 1


def test_bad_runs_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        fit_runs([])
    res = CliRunner().invoke(app, ["sim", "fit", str(tmp_path), "-o", str(tmp_path / "p")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    # an --out that is a folder: said as such, not as an existing file to --force over;
    # '' (which would read as the current folder) is refused as an empty path
    for out, want in (("", "'--out': empty: give a path"), (str(tmp_path), "is a folder")):
        res = CliRunner().invoke(app, ["sim", "fit", str(tmp_path), "-o", out, "--force"])
        assert res.exit_code == 2 and want in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1, res.output


@pytest.fixture()
def truth_server(runs: dict[str, Path]) -> Iterator[str]:
    """serve-sim running the known preset in real time (the grid takes a few seconds)."""
    with serve_sim("--preset", str(runs["truth"]), "--model", "m") as url:
        yield url


def test_an_active_profile_of_an_endpoint_fits_its_steps(truth_server: str,
                                                         tmp_path: Path) -> None:
    """The grid sent over HTTP to a simulator of known step costs: the fit finds its
    per-step and per-token costs, and the HTTP round trip as time outside the steps."""
    out = tmp_path / "active.yaml"
    res = CliRunner().invoke(app, ["sim", "fit", "--endpoint", truth_server,
                                   "--served-model", "m", "--max-context", "2048", "-o",
                                   str(out), "--kv-capacity-tokens", "50000"])
    assert res.exit_code == 0, res.output
    p = parse_preset(out.read_text())
    assert p.step_fit is not None and p.fit_summary is not None
    grid = sorted(d.name for d in (tmp_path / "active-grid").iterdir() if d.is_dir())
    assert grid == ["grid-decode-c1", "grid-decode-c2", "grid-decode-c4", "grid-decode-c8",
                    "grid-prefill", "grid-probe", "grid-save"]
    # over real HTTP on a shared machine: looser than the virtual-time fit above, but a
    # fit off by half fails
    assert p.fit_summary["residuals"]["decode_median"] < 0.15, p.fit_summary
    assert p.fit_summary["residuals"]["ttft_median"] < 0.25, p.fit_summary
    assert p.step_fit.intercept_s == pytest.approx(FIT.intercept_s, rel=0.4)
    assert p.step_fit.prefill_token_s == pytest.approx(FIT.prefill_token_s, rel=0.4)
    assert 0 < p.step_fit.request_s < 0.05  # the HTTP round trip, outside the steps


def test_the_engine_version_comes_from_its_log(tmp_path: Path) -> None:
    from agentbench.experiment.enginefacts import log_version

    log = tmp_path / "server.log"
    log.write_text("(APIServer pid=1) INFO [api_utils.py:347]  ▄▄ ▄█ █  version 0.32.0\n"
                   "later: version 9.9.9\n")
    assert log_version(log) == "0.32.0"
    log.write_text("0.00.000.922 I srv  llama_server: initializing ...\n")
    assert log_version(log) is None
    assert log_version(tmp_path / "missing.log") is None
    log.write_bytes(b"\xff\xfe version 1.2.3rc1 \x00")
    assert log_version(log) == "1.2.3rc1"


def test_options_a_user_gets_wrong_are_caught(runs: dict[str, Path], tmp_path: Path) -> None:
    """A capacity below the longest prompt fitted on (every request would be refused) is
    one line; ``--engine llama.cpp`` gives the slots scheduler."""
    out = tmp_path / "p.yaml"
    base = ["sim", "fit", str(runs["fit"]), "-o", str(out)]
    small = CliRunner().invoke(app, [*base, "--kv-capacity-tokens", "100"])
    assert small.exit_code == 2 and "longest prompt" in small.output, small.output
    assert not out.exists()
    ok = CliRunner().invoke(app, [*base, "--kv-capacity-tokens", "100000", "--engine",
                                  "llama.cpp"])
    assert ok.exit_code == 0, ok.output
    assert parse_preset(out.read_text()).scheduler == "slots"


def test_an_out_in_a_folder_that_takes_no_file_is_refused_before_the_fit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``-o /proc/p.yaml`` (a read-only folder for a user who is not root): one line
    naming --out before any run is read, where it came after the fit (after --endpoint's
    minutes of profiling)."""
    import agentbench.experiment.simfit as simfit

    def no_fit(*_: object) -> None:
        raise AssertionError("the fit ran")

    monkeypatch.setattr(simfit, "fit_runs", no_fit)
    res = CliRunner().invoke(app, ["sim", "fit", "no-such-run", "-o", "/proc/p.yaml",
                                   "--kv-capacity-tokens", "100000"])
    assert res.exit_code == 2 and "--out" in res.output and "cannot write a file in " \
        "'/proc'" in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_a_slots_preset_is_checked_token_by_token(runs: dict[str, Path],
                                                   tmp_path: Path) -> None:
    """A run that does not say its block size, checked with a llama.cpp-style preset:
    KV blocks of 1 token, as llama.cpp reuses."""
    from tests.helpers import SCENARIOS

    check = sim_check(runs["held"], str(SCENARIOS / "presets" / "llama-cpp-tiny.yaml"),
                      out=tmp_path / "c")
    assert check.block_size == 1


def _client_late(run_dir: Path, out: Path, late_ns: int) -> Path:
    """``run_dir`` copied as a busy client would have seen it: of the token events of one
    engine step, the first read on time, the second ``late_ns`` later, and so on."""
    import shutil
    from collections import defaultdict

    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copytree(run_dir, out)
    t = pq.read_table(out / "requests.parquet")
    events = t.column("token_event_ns").to_pylist()
    at: dict[int, list[tuple[int, int]]] = defaultdict(list)  # step end: (request, event)
    for r, ev in enumerate(events):
        for j, ns in enumerate(ev or []):
            at[ns].append((r, j))
    for ns, seen in at.items():
        for rank, (r, j) in enumerate(sorted(seen)):
            events[r][j] = ns + rank * late_ns
    cols = {"token_event_ns": events,
            "first_token_ns": [ev[0] if ev else v for ev, v in
                               zip(events, t.column("first_token_ns").to_pylist(), strict=True)],
            "last_token_ns": [ev[-1] if ev else v for ev, v in
                              zip(events, t.column("last_token_ns").to_pylist(), strict=True)]}
    cols["end_ns"] = [None if e is None else max(e, last or 0) for e, last in
                      zip(t.column("end_ns").to_pylist(), cols["last_token_ns"], strict=True)]
    for name, col in cols.items():
        i = t.schema.get_field_index(name)
        t = t.set_column(i, name, pa.array(col, t.schema.field(i).type))
    pq.write_table(t, out / "requests.parquet")
    return out


def test_a_client_that_reads_one_steps_tokens_apart_does_not_break_the_fit(
        runs: dict[str, Path], tmp_path: Path) -> None:
    """Eight streams on a loaded client read the tokens of one step up to 1.7 ms apart
    (llama.cpp, 2026-12-02). A window taken from another request's token of the same step
    to this one's first token then held a whole prefill in 1.7 ms, and the fit, weighting
    windows by 1/measured, put all prefill time outside the steps (TTFT residual 75%)."""
    fit = fit_runs([_client_late(runs["held"], tmp_path / "late", 600_000)])
    assert fit.residuals["ttft_median"] < 0.02 and fit.residuals["decode_median"] < 0.02, \
        fit.residuals
    true = dict(zip(STEP_FIT_TERMS, FIT.values(), strict=True))
    for k in ("intercept_s", "prefill_token_s", "decode_token_s"):
        assert fit.coef[k] == pytest.approx(true[k], rel=0.1), (k, fit.coef)
    assert fit.coef["request_s"] < 1e-3, fit.coef


def _refusal(cfg: dict[str, object], n: int, out: int = 30) -> str | None:
    """Why a simulated endpoint ``cfg`` refuses a request of ``n`` prompt and ``out``
    output tokens (None: it takes it)."""
    from agentbench.scenario.endpoints import SimulatedEndpoint
    from agentbench.sim.cluster import Cluster, SimRejected

    cl = Cluster(SimulatedEndpoint.model_validate({"kind": "simulated", **cfg}))
    try:
        cl.submit(cl.make_hashed([], n, max_tokens=out, ignore_eos=True))
    except SimRejected as e:
        return str(e)
    return None


def test_a_llama_slot_holds_its_window_and_pools_keep_theirs(tmp_path: Path) -> None:
    """The shipped llama.cpp preset: its slots' KV, converted at the median token ratio
    (2,849 tokens), is less than its window (2,929, at the longest prompts' ratio); a slot
    holds the window, so a 2,870-token prompt the engine served is served, and a longer
    request is a context overflow, not a KV refusal. With P/D pools the smaller of the
    pools' presets' windows holds."""
    from tests.helpers import SCENARIOS

    llama = {"preset": str(SCENARIOS / "presets" / "llama-cpp-tiny.yaml"), "block_size": 1}
    assert _refusal(llama, 2870) is None
    assert _refusal(llama, 2928) is None  # its output cut at the window, as llama.cpp's
    assert "maximum context length is 2929" in (_refusal(llama, 2929) or "")
    text = (ROOT / "agentbench" / "sim" / "preset_files" / "h200-llama3-70b.yaml").read_text()
    assert "max_context_tokens" not in text
    windowed = tmp_path / "windowed.yaml"
    windowed.write_text(text.replace("\nfigures:\n", "\nfigures:\n  max_context_tokens: "
                                     "{value: 4096, source: test}\n", 1))
    pools = {"prefill": {"instances": 1, "preset": str(windowed)},
             "decode": {"instances": 1, "preset": "h200-llama3-70b"}}
    assert "maximum context length is 4096" in (
        _refusal({"disaggregation": pools}, 4096) or "")
    pools["prefill"]["preset"] = "h200-llama3-70b"
    assert _refusal({"preset": str(windowed), "disaggregation": pools}, 4096) is None


def test_the_fit_checks_and_merges_the_window(runs: dict[str, Path]) -> None:
    """A window shorter than a prompt the engine served is one line; runs that state
    different windows give the smallest; a ratio off 1 on the longest prompts converts the
    window even when the median is 1."""
    fit = fit_runs([runs["fit"]])
    with pytest.raises(InputError, match="shorter than the longest prompt"):
        fitted_preset(fit, name="w", kv_capacity_tokens=4_000_000, max_context_tokens=100)
    fit.facts.long_prompt_ratio = 0.5
    preset = fitted_preset(fit, name="w", kv_capacity_tokens=4_000_000,
                           max_context_tokens=40_000)
    assert preset.max_context_tokens == 80_000 and preset.kv_capacity_tokens == 4_000_000
    from agentbench.experiment.enginefacts import EngineFacts
    from agentbench.experiment.simfit import merge_facts

    merged = merge_facts([EngineFacts(max_context_tokens=8192),
                          EngineFacts(max_context_tokens=4096), EngineFacts()])
    assert merged.max_context_tokens == 4096
    assert "8,192" in merged.sources["max_context_tokens"]


def test_sim_check_sets_failed_requests_side_by_side(runs: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """A preset whose window is shorter than some of the run's prompts refuses them; the
    check says how many failed on each side and how many of them are the same requests."""
    from agentbench.experiment.simcheck import format_check

    same = sim_check(runs["held"], str(runs["truth"]), out=tmp_path / "same")
    assert "failed_measured" not in same.per_request
    assert "failed requests" not in format_check(same)
    small = tmp_path / "small.yaml"
    small.write_text(TRUE.replace("\nfigures:\n", "\nfigures:\n  max_context_tokens: "
                                  "{value: 8000, source: test}\n", 1))
    check = sim_check(runs["held"], str(small), out=tmp_path / "small")
    pr = check.per_request
    assert pr["failed_measured"] == pr["failed_both"] == 0 < pr["failed_predicted"]
    assert f"predicted {pr['failed_predicted']:.0f}, the same requests in both 0" \
        in format_check(check)


def _grid_in_virtual_time(preset: Path, out: Path) -> list[Path]:
    """The grid ``sim fit --endpoint`` sends, replayed on a simulated engine of ``preset``
    in virtual time (exact, and seconds instead of minutes)."""
    from agentbench.experiment.simgrid import grid_traces
    from agentbench.traces.readers.native import write

    dirs = []
    for i, (name, (trace, lanes)) in enumerate(grid_traces(2048, (1, 2)).items()):
        path = write(trace, out / f"{name}.parquet")
        sc = Scenario.model_validate({
            "name": name, "seed": 100 + i, "clock": "virtual",
            "endpoints": [{"kind": "simulated", "name": "sim", "preset": str(preset),
                           "block_size": 16}],
            "trace": {"kind": "file", "source": str(path)},
            "load": {"kind": "lanes", "concurrency": lanes},
            "timing": {"strategy": "think-only", "time_scale": 0.0},
            "limits": {"recycle": False}, "server_metrics": {"enabled": False},
            "output": {"dir": str(out), "run_id": name}})
        dirs.append(run(sc, progress=False).run_dir)
    return dirs


def test_the_save_probe_measures_what_a_slots_engine_pays_to_save(tmp_path: Path) -> None:
    """A llama.cpp-style engine saving each idle slot's new prompt at 2e-4 s a token: the
    grid's save probe measures it (each round's new task waits for one save), the fit keeps
    the probe's run out of its windows, and a slots preset prices its copies with it. A
    paged engine has no such saves: the probe reads 0 and the preset assumes none."""
    from agentbench.experiment.savecost import is_save_probe, save_cost
    from tests.helpers import SCENARIOS

    text = (SCENARIOS / "presets" / "llama-cpp-tiny.yaml").read_text()
    slots = tmp_path / "slots.yaml"
    slots.write_text(re.sub(r"(cpu_load_s_per_token:\n    value: )\S+", r"\g<1>0.0002", text))
    assert "value: 0.0002\n" in slots.read_text()
    dirs = _grid_in_virtual_time(slots, tmp_path / "slots")
    probe = [d for d in dirs if is_save_probe(d)]
    assert [d.name for d in probe] == ["grid-save"]
    cost = save_cost(probe[0])
    assert len(cost.rounds) == 8 and cost.tokens > 500
    # the two short prompts' different prompt work priced with the fit's terms: exact
    fit = fit_runs(dirs)
    assert fit.save is not None and fit.save.s_per_token == pytest.approx(2e-4, rel=2e-3)
    assert cost.s_per_token == pytest.approx(2e-4, rel=0.02), cost  # uncorrected
    assert len(save_cost([probe[0], probe[0]]).rounds) == 16  # runs' rounds pooled
    without = fit_runs([d for d in dirs if d not in probe])
    assert without.save is None and fit.save_error is None
    assert fit.observations == without.observations  # the probe's windows are left out
    preset = fitted_preset(fit, name="s", kv_capacity_tokens=20_000, max_num_seqs=4,
                           engine="llama.cpp")
    assert preset.scheduler == "slots" and preset.cpu_load_s_per_token == fit.save.s_per_token
    assert save_warning(fit, "slots") is None
    # a grid says no engine family: a paged preset of an engine that saves says so
    paged_preset = fitted_preset(fit, name="s", kv_capacity_tokens=20_000)
    assert paged_preset.scheduler == "paged" and paged_preset.cpu_load_s_per_token == 0
    assert "--engine llama.cpp or --scheduler slots" in (save_warning(fit, "paged") or "")
    assert any("--scheduler slots" in n for n in paged_preset.provenance.notes)
    src = dict(preset.provenance.figures)["cpu_load_s_per_token"]
    assert src.startswith("measured: the grid's save probe, median of 8 saves"), src
    assert "s per token saved" in format_fit(fit)
    bare = fitted_preset(without, name="s", kv_capacity_tokens=20_000, max_num_seqs=4,
                         engine="llama.cpp")
    assert bare.cpu_load_s_per_token == 0.0
    assert "no save probe" in dict(bare.provenance.figures)["cpu_load_s_per_token"]
    with pytest.raises(InputError, match="besides the grid's save probe"):
        fit_runs(probe)

    paged = tmp_path / "paged.yaml"
    paged.write_text(TRUE)
    pdirs = _grid_in_virtual_time(paged, tmp_path / "paged")
    pfit = fit_runs(pdirs)
    assert pfit.save is not None and pfit.save.s_per_token < 1e-6, pfit.save
    assert fitted_preset(pfit, name="p", kv_capacity_tokens=4_000_000
                         ).cpu_load_s_per_token == 0.0
    assert save_warning(pfit, "paged") is None  # nothing saved, nothing to say


def test_a_failed_save_probe_leaves_the_fit_standing(runs: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """A probe none of whose rounds succeeded (its prompts refused by a short window, say)
    does not stop the fit: the saves go unpriced, and the preset and the CLI say why."""
    import json
    import shutil

    bad = tmp_path / "grid-save"
    shutil.copytree(runs["held"], bad)
    info = json.loads((bad / "run.json").read_text())
    info["trace"]["name"] = "sim-fit-save"
    (bad / "run.json").write_text(json.dumps(info))
    fit = fit_runs([runs["fit"], bad])
    assert fit.save is None and "no round whose three requests succeeded" in (
        fit.save_error or "")
    assert fit.observations == fit_runs([runs["fit"]]).observations
    preset = fitted_preset(fit, name="f", kv_capacity_tokens=4_000_000, engine="llama.cpp")
    assert preset.cpu_load_s_per_token == 0.0
    assert "the save probe failed" in dict(preset.provenance.figures)["cpu_load_s_per_token"]
    res = CliRunner().invoke(app, ["sim", "fit", str(runs["fit"]), str(bad), "-o",
                                   str(tmp_path / "f.yaml"), "--kv-capacity-tokens",
                                   "4000000", "--engine", "llama.cpp"])
    assert res.exit_code == 0, res.output
    assert "warning: " in res.output and "priced at 0" in res.output


def test_a_save_probe_without_a_whole_round_is_one_line(runs: dict[str, Path],
                                                       tmp_path: Path) -> None:
    """A run that is not the probe is not taken for one; read as one, it is one line."""
    from agentbench.experiment.savecost import is_save_probe, save_cost

    assert not is_save_probe(runs["fit"]) and not is_save_probe(tmp_path / "missing")
    with pytest.raises(InputError, match="no round whose three requests succeeded"):
        save_cost(runs["fit"])


def test_a_llama_server_without_a_ram_cache_gives_a_preset_without_one(
        tmp_path: Path) -> None:
    """``--cache-ram 0`` turns llama-server's host-RAM prompt cache off (and with it the
    idle-slot saves): the fitted slots preset has none, so it neither saves nor restores."""
    from agentbench.experiment.savecost import save_cost
    from agentbench.scenario.endpoints import SimulatedEndpoint
    from agentbench.sim.cluster import Cluster
    from tests.helpers import SCENARIOS

    def ram(cmd: str) -> int | None:
        return engine_facts({"server": {"command": cmd}}, None).ram_cache_tokens

    assert ram("llama-server -c 8192 -np 4 --cache-ram 0") == 0
    assert ram("llama-server -c 8192 -cram 0") == 0
    for kept in ("llama-server -c 8192", "llama-server -c 8192 -cram 4096",
                 "vllm serve m --cache-ram 0"):
        assert ram(kept) is None, kept
    text = (SCENARIOS / "presets" / "llama-cpp-tiny.yaml").read_text()
    text = re.sub(r"(cpu_load_s_per_token:\n    value: )\S+", r"\g<1>0.0002", text)
    off = tmp_path / "off.yaml"
    off.write_text(text.replace("\nfigures:\n", "\nfigures:\n  ram_cache_tokens: "
                                "{value: 0, source: '--cache-ram 0'}\n", 1))
    preset = load_preset_file(off)
    assert preset.ram_cache_tokens == 0
    assert parse_preset(preset_yaml(preset)).ram_cache_tokens == 0
    cl = Cluster(SimulatedEndpoint.model_validate({"kind": "simulated", "preset": str(off)}))
    assert all(i.ram is None for i in cl.instances)  # type: ignore[attr-defined]
    dirs = _grid_in_virtual_time(off, tmp_path / "grid")
    assert save_cost([d for d in dirs if d.name == "grid-save"]).s_per_token == 0.0
    fit = fit_runs(dirs)
    fit.facts.ram_cache_tokens = 0
    fit.facts.sources["ram_cache_tokens"] = "the server command's --cache-ram 0"
    fitted = fitted_preset(fit, name="o", kv_capacity_tokens=20_000, max_num_seqs=4,
                           engine="llama.cpp")
    assert fitted.ram_cache_tokens == 0 and fitted.cpu_load_s_per_token < 1e-8
    assert "--cache-ram 0" in fitted.provenance.source_of("ram_cache_tokens")
    out = tmp_path / "cli.yaml"
    res = CliRunner().invoke(app, ["sim", "fit", *map(str, dirs), "-o", str(out),
                                   "--kv-capacity-tokens", "20000", "--engine", "llama.cpp",
                                   "--no-ram-cache"])
    assert res.exit_code == 0, res.output
    assert load_preset_file(out).ram_cache_tokens == 0


def test_the_sim_check_it_suggests_pastes_as_one_word_per_path(runs: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    """``wrote ...; check it on held-out work: agentbench sim check RUN --preset OUT`` with
    OUT in a folder with a space: OUT is one shell word (it was printed bare)."""
    import shlex

    out = tmp_path / "my presets" / "engine.yaml"
    out.parent.mkdir()
    res = CliRunner().invoke(app, ["sim", "fit", str(runs["fit"]), "-o", str(out),
                                   "--kv-capacity-tokens", "100000"])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("wrote "))
    assert shlex.split(line.split(": ", 1)[1])[-2:] == ["--preset", str(out)]
