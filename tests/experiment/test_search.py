"""``agentbench search``: bisection over lanes or rate for the most load whose goodput
still reaches the target, on a fake run (goodput a known function of load) and end to end
on the simulator in virtual time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.experiment import run as run_mod
from agentbench.experiment.search import format_search, search
from agentbench.scenario.model import Scenario
from tests.helpers import ROOT


def _scenario(load: dict[str, Any], slos: dict[str, Any] | None = None) -> Scenario:
    return Scenario.model_validate({
        "name": "s", "endpoints": [{"kind": "simulated", "preset": "instant"}],
        "trace": {"kind": "synth", "profile": "codex", "sessions": 2}, "load": load,
        "limits": {"max_requests": 4}, "slos": {"ttft_ms": 100} if slos is None else slos})


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """run_variant replaced: goodput 1 - load/40 (monotone), every load run recorded."""
    ran: list[float] = []

    def fake(sc: Any, **_: Any) -> Any:
        x = float(sc.load.concurrency if sc.load.kind == "lanes" else sc.load.rate_per_s)
        ran.append(x)
        g = max(0.0, 1 - x / 40)
        summary = {"overall": {"goodput": {"requests": g, "agents": g},
                               "latency": {"ttft_ms": {"p50": x, "p90": 2 * x}},
                               "throughput": {"per_gpu_total_tok_s": 100 * x},
                               "requests": {"total": 10},
                               # a trace of 3 trees keeps at most 3 lanes busy
                               "load": {"lanes_active": min(int(x), 3)}}}
        return SimpleNamespace(summary=summary, run_dir=Path(f"/r/{x:g}"), failure=None)

    monkeypatch.setattr(run_mod, "run_variant", fake)
    return ran


def test_lanes_are_bisected_to_the_last_that_passes(fake_runs: list[float]) -> None:
    # goodput >= 0.9 while load <= 4: the answer is 4, 5 fails
    res = search(_scenario({"kind": "lanes", "concurrency": 1}), lo=1, hi=64, target=0.9)
    assert (res.best, res.best_failing) == (4, 5)
    assert fake_runs[:2] == [64, 1] and len(fake_runs) <= 8
    assert all(p.passed == (p.load <= 4) for p in res.probes)
    assert "answer: 4 lanes" in "\n".join(format_search(res))


def test_rates_are_bisected_to_the_tolerance(fake_runs: list[float]) -> None:
    res = search(_scenario({"kind": "rate", "rate_per_s": 1.0}), lo=0.5, hi=32, target=0.5,
                 tolerance=0.05, max_probes=20)
    assert res.best is not None and res.best_failing is not None
    assert res.best <= 20 < res.best_failing and res.best_failing - res.best <= 0.05 * 32


def test_the_ends_of_the_range_answer_at_once(fake_runs: list[float]) -> None:
    sc = _scenario({"kind": "lanes", "concurrency": 1})
    top = search(sc, lo=1, hi=2, target=0.9)
    assert top.best == 2 and fake_runs == [2] and "raise it" in top.notes[0]
    fake_runs.clear()
    none = search(sc, lo=30, hi=39, target=0.9)
    assert none.best is None and fake_runs == [39, 30]
    assert "answer: no load in the range" in "\n".join(format_search(none))


def test_max_probes_bounds_the_search_and_says_so(fake_runs: list[float]) -> None:
    res = search(_scenario({"kind": "lanes", "concurrency": 1}), lo=1, hi=1000, target=0.9,
                 max_probes=3)
    assert len(fake_runs) == 3 and any("--max-probes" in n for n in res.notes)


def test_the_load_must_be_delivered_and_probes_must_be_enough(fake_runs: list[float]) -> None:
    """A passing load whose lanes had nothing to send (the trace ran out) is said; one probe
    says the rest of the range is unknown."""
    res = search(_scenario({"kind": "lanes", "concurrency": 1}), lo=1, hi=8, target=0.5)
    assert res.best == 8 and any("8 lanes passed with only 3 of them sending" in n
                                 for n in res.notes)
    fake_runs.clear()
    res = search(_scenario({"kind": "lanes", "concurrency": 1}), lo=1, hi=64, target=0.9,
                 max_probes=1)
    assert fake_runs == [64] and res.best is None and "below 64 is unknown" in res.notes[0]


@pytest.mark.parametrize(("kw", "match"), [
    ({"slos": {}}, "set slos"),
    ({"lo": 0}, "0 < low <= high"),
    ({"lo": 9, "hi": 3}, "0 < low <= high"),
    ({"goal": "sessions"}, "requests or agents"),
    ({"hi": float("inf")}, "finite numbers"),
    ({"lo": float("nan")}, "finite numbers"),
    ({"hi": 1_000_000}, "at most 100,000 lanes"),
    ({"lo": 1.5}, "lanes are whole numbers, got 1.5:4"),  # searched 2:4 without a word
    ({"lo": 1.5, "hi": 1.9}, "whole numbers, got 1.5:1.9"),  # said "got 2:1"
])
def test_bad_requests_are_one_line(kw: dict[str, Any], match: str) -> None:
    sc = _scenario({"kind": "lanes", "concurrency": 1}, kw.pop("slos", None))
    args = {"lo": 1, "hi": 4, **kw}
    with pytest.raises(InputError, match=match):
        search(sc, **args)


def test_search_end_to_end_on_the_simulator(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, [
        "search", str(ROOT / "scenarios" / "quickstart.yaml"), "--lanes", "1:32",
        "--target", "0.8", "-o", str(tmp_path), "--set", "trace.filters.sessions=null",
        "--set", "limits.max_sessions=null", "--set", "limits.duration_s=1800",
        "--set", "limits.recycle=true"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "quickstart-search.json").read_text())
    probes = {p["load"]: p for p in doc["probes"]}
    best, worse = doc["best"], doc["best_failing"]
    assert best is not None and worse == best + 1
    assert probes[best]["passed"] and not probes[worse]["passed"]
    assert all(Path(p["run_dir"]).is_dir() for p in doc["probes"])
    assert f"answer: {best:g} lanes" in res.output
    wrong = CliRunner().invoke(app, ["search", str(ROOT / "scenarios" / "quickstart.yaml"),
                                     "--rate", "1:2"])
    assert wrong.exit_code == 2 and "--rate needs a rate load" in wrong.output


def test_a_scenario_with_variants_is_refused(fake_runs: list[float]) -> None:
    from agentbench.scenario.model import Variant

    sc = _scenario({"kind": "lanes", "concurrency": 1})
    sc.variants = [Variant(name="a")]
    with pytest.raises(InputError, match="one variant at a time"):
        search(sc, lo=1, hi=4)
    assert fake_runs == []



def test_a_top_at_the_most_lanes_is_not_told_to_be_raised(fake_runs: list[float],
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from agentbench.scenario import model

    monkeypatch.setattr(model, "MAX_LANES", 8)  # every load passes up to 8 (goodput 0.8)
    res = search(_scenario({"kind": "lanes", "concurrency": 1}), lo=1, hi=8, target=0.5)
    assert res.best == 8 and "at the most lanes a scenario may run (8)" in res.notes[0]
    assert "raise it" not in " ".join(res.notes)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, asyncio.CancelledError])
def test_a_search_stopped_mid_probe_writes_the_probes_that_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_runs: list[float],
        stop: type[BaseException]) -> None:
    """Ctrl-C (KeyboardInterrupt) or SIGTERM (a run's CancelledError) during the third
    probe: the two probes that finished are printed and written to <name>-search.json,
    marked interrupted, and the stop goes on to its exit code. Both were lost: no JSON,
    no frontier, exit 130 or 143 without a word."""
    ran = run_mod.run_variant

    def stopped_at_16(sc: Any, **kw: Any) -> Any:
        if sc.load.concurrency == 32:  # the third probe: 64 failed, 1 passed
            raise stop
        return ran(sc, **kw)

    monkeypatch.setattr(run_mod, "run_variant", stopped_at_16)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario({"kind": "lanes", "concurrency": 1})
                                   .model_dump(mode="json", exclude_none=True)))
    args = ["search", str(path), "--lanes", "1:64", "-o", str(tmp_path / "out")]
    if stop is KeyboardInterrupt:  # typer's exit code for it
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 130
        assert "answer so far: 1 lanes" in res.output
    else:  # main() makes it 143; the test runner does not catch it
        with pytest.raises(stop):
            CliRunner().invoke(app, args)
    assert fake_runs == [64, 1]
    doc = json.loads((tmp_path / "out" / "s-search.json").read_text())
    assert doc["interrupted"] is True and [p["load"] for p in doc["probes"]] == [64, 1]
    assert (doc["best"], doc["best_failing"]) == (1, 64)
    assert "interrupted after 2 probes during the probe at 32 lanes" in doc["notes"][-1]


def test_a_search_stopped_by_an_error_writes_the_probes_that_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_runs: list[float]) -> None:
    """The endpoint gone before the third probe (its pre-run check: one line, exit 2): the
    two probes that finished are printed and written, marked interrupted, with the
    error's line. The frontier was lost with the error. An error in the first probe (a
    mistyped URL) writes nothing: there is no search to keep."""
    ran = run_mod.run_variant

    def gone_at(load: int) -> Any:
        def run(sc: Any, **kw: Any) -> Any:
            if sc.load.concurrency == load:
                raise InputError("cannot reach http://127.0.0.1:9/v1", field="url")
            return ran(sc, **kw)
        return run

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario({"kind": "lanes", "concurrency": 1})
                                   .model_dump(mode="json", exclude_none=True)))
    args = ["search", str(path), "--lanes", "1:64", "-o", str(tmp_path / "out")]
    monkeypatch.setattr(run_mod, "run_variant", gone_at(32))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "cannot reach" in res.output.splitlines()[-1]
    doc = json.loads((tmp_path / "out" / "s-search.json").read_text())
    assert doc["interrupted"] is True and [p["load"] for p in doc["probes"]] == [64, 1]
    assert ("stopped by an error (field 'url': cannot reach http://127.0.0.1:9/v1) after 2 "
            "probes during the probe at 32 lanes") in doc["notes"][-1]
    (tmp_path / "out" / "s-search.json").unlink()
    monkeypatch.setattr(run_mod, "run_variant", gone_at(64))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert not (tmp_path / "out" / "s-search.json").exists()


def test_a_link_where_the_search_writes_is_left_not_written_through(
        tmp_path: Path, fake_runs: list[float]) -> None:
    """``<name>-search.json`` a symbolic link (to another file, or dangling): the file it
    led to was overwritten, or made where the link pointed. The link and what it leads
    to are left as they were now; the result takes the next free name."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario({"kind": "lanes", "concurrency": 1})
                                   .model_dump(mode="json", exclude_none=True)))
    out = tmp_path / "out"
    out.mkdir()
    victim, nowhere = tmp_path / "victim.txt", tmp_path / "nowhere.json"
    victim.write_text("keep me")
    for k, target in ((1, victim), (2, nowhere)):
        link = out / ("s-search.json" if k == 1 else "s-search-2.json")
        link.symlink_to(target)
        res = CliRunner().invoke(app, ["search", str(path), "--lanes", "1:2", "-o", str(out)])
        assert res.exit_code == 0, res.output
        assert link.is_symlink()
        assert json.loads((out / f"s-search-{2 * k - 1}.json").read_text())["best"] == 2
    assert victim.read_text() == "keep me" and not nowhere.exists()
    assert sorted(p.name for p in out.iterdir()) == [
        "s-search-1.json", "s-search-2.json", "s-search-3.json", "s-search.json"]


def test_search_never_replaces_what_is_where_its_result_goes(
        tmp_path: Path, fake_runs: list[float]) -> None:
    """An earlier search's file (or a folder, or a link) at ``<name>-search.json``: the
    result goes to ``<name>-search-1.json``, then ``-2``; nothing there is touched (an
    earlier result was overwritten without a word)."""
    (tmp_path / "quickstart-search.json").mkdir()
    (tmp_path / "quickstart-search-1.json").write_text("earlier")
    (tmp_path / "quickstart-search-2.json").symlink_to(tmp_path / "nowhere")
    for k in (3, 4):
        r = CliRunner().invoke(app, ["search", str(ROOT / "scenarios" / "quickstart.yaml"),
                                     "--lanes", "1:2", "-o", str(tmp_path)])
        assert r.exit_code == 0, r.output
        out = tmp_path / f"quickstart-search-{k}.json"
        assert r.output.splitlines()[-1] == f"search: {out}"
        assert json.loads(out.read_text())["best"] == 2
    assert (tmp_path / "quickstart-search-1.json").read_text() == "earlier"
    assert (tmp_path / "quickstart-search.json").is_dir()
    assert not (tmp_path / "nowhere").exists()


def test_a_result_written_where_the_search_writes_while_it_runs_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_runs: list[float]) -> None:
    """Another search into the same folder ends while this one runs and takes
    ``<name>-search.json`` (the free name both picked at their start): this result goes to
    ``<name>-search-1.json`` and the other is kept (the search that ended last replaced
    the other's result, both printing the same name)."""
    ran = run_mod.run_variant
    out = tmp_path / "out"

    def beside(sc: Any, **kw: Any) -> Any:
        if not (out / "s-search.json").exists():
            (out / "s-search.json").write_text("the other search's")
        return ran(sc, **kw)

    monkeypatch.setattr(run_mod, "run_variant", beside)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario({"kind": "lanes", "concurrency": 1})
                                   .model_dump(mode="json", exclude_none=True)))
    out.mkdir()
    res = CliRunner().invoke(app, ["search", str(path), "--lanes", "1:2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[-1] == f"search: {out / 's-search-1.json'}"
    assert (out / "s-search.json").read_text() == "the other search's"
    assert json.loads((out / "s-search-1.json").read_text())["best"] == 2
    assert sorted(p.name for p in out.iterdir()) == ["s-search-1.json", "s-search.json"]


@pytest.mark.parametrize(("target", "says"), [(0.9, ">= 90%"), (0.995, ">= 99.5%"),
                                              (0.9999, ">= 99.99%"), (0.875, ">= 87.5%")])
def test_the_answer_names_the_target_as_given(fake_runs: list[float], target: float,
                                              says: str) -> None:
    """--target 0.9999 was printed as "goodput >= 100%" (and 0.995 as 100%, 0.875 as
    88%): a goal no probe could meet, or one other than the search's."""
    for lo, hi in ((1, 2), (1, 64), (39, 39)):
        res = search(_scenario({"kind": "lanes", "concurrency": 1}), lo=lo, hi=hi,
                     target=target)
        answer = next(ln for ln in format_search(res) if ln.startswith("answer"))
        assert says in answer, answer


def test_a_probe_that_hit_more_than_its_trace_could_reuse_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a real endpoint every probe sends the same prompts (one seed), so a probe
    after another finds its prompts cached: serve-sim's 1-lane probe after the 8-lane one
    hit 91%, 2 and 3 lanes 96% and 98% of their prompt tokens against a potential of 87%,
    and passed, where a fresh server gave 4 lanes 29%. The search said nothing."""
    def fake(sc: Any, **_: Any) -> Any:
        x = float(sc.load.concurrency)
        g = 1.0 if x <= 3 else 0.25
        usage = 0.97 if x in (2, 3) else 0.2
        summary = {"overall": {"goodput": {"requests": g, "agents": g},
                               "latency": {"ttft_ms": {"p50": x, "p90": 2 * x}},
                               "throughput": {"per_gpu_total_tok_s": 100 * x},
                               "requests": {"total": 24},
                               "hit_rate": {"usage": {"value": usage},
                                            "potential": {"value": 0.87}},
                               "load": {"lanes_active": int(x)}}}
        return SimpleNamespace(summary=summary, run_dir=Path(f"/r/{x:g}"), failure=None)

    monkeypatch.setattr(run_mod, "run_variant", fake)
    res = search(_scenario({"kind": "lanes", "concurrency": 1}), lo=1, hi=8)
    assert res.best == 3
    said = [n for n in res.notes if "above what its trace could reuse" in n]
    assert len(said) == 1 and "2, 3 lanes" in said[0], res.notes
    assert [p.hit_rate for p in sorted(res.probes, key=lambda p: p.load)][:3] == [
        0.2, 0.97, 0.97]


def test_rates_near_the_least_are_bisected_not_rounded_onto_a_probe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The midpoint of 1e-06 and 2e-06 rounded to 6 decimals is 2e-06, probed already: the
    search stopped after 3 of 8 probes at a 50% gap and blamed --max-probes."""
    def fake(sc: Any, **_: Any) -> Any:
        x = float(sc.load.rate_per_s)
        g = 1.0 if x <= 1.7e-6 else 0.0
        summary = {"overall": {"goodput": {"requests": g, "agents": g},
                               "latency": {"ttft_ms": {}}, "throughput": {},
                               "requests": {"total": 1}}}
        return SimpleNamespace(summary=summary, run_dir=Path(f"/r/{x:g}"), failure=None)

    monkeypatch.setattr(run_mod, "run_variant", fake)
    res = search(_scenario({"kind": "rate", "rate_per_s": 1.0}), lo=1e-6, hi=4e-6)
    assert res.best is not None and res.best_failing is not None
    assert 1.6e-6 <= res.best <= 1.7e-6 < res.best_failing <= 1.8e-6, res.probes
    assert not any("--max-probes" in n for n in res.notes), res.notes


def test_a_probe_with_nothing_to_judge_says_so_not_that_the_slos_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--goal agents on runs whose bound ends every agent early (max_requests 10): no
    agent is judged, goodput is None, and the search said "no load from 1 meets the
    SLOs", of SLOs no request had missed."""
    def fake(sc: Any, **_: Any) -> Any:
        summary = {"overall": {"goodput": {"requests": 1.0, "agents": None},
                               "latency": {"ttft_ms": {}}, "throughput": {},
                               "requests": {"total": 10}}}
        return SimpleNamespace(summary=summary, run_dir=Path("/r"), failure=None)

    monkeypatch.setattr(run_mod, "run_variant", fake)
    res = search(_scenario({"kind": "lanes", "concurrency": 1}), lo=1, hi=8, goal="agents")
    text = "\n".join(format_search(res))
    assert res.best is None and "meets the SLOs" not in text, text
    assert "no agents to judge" in text and "--goal requests" in text, text
    assert all(p.note and "no agents to judge" in p.note for p in res.probes)
