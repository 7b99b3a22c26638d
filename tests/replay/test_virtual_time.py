"""Virtual time: the replay and the embedded simulator on one simulated clock.

- One implementation of the replay semantics: a scenario replayed over HTTP on the wall
  clock and in virtual time sends the same requests, in the same order per session, with
  the same prompt, output and cached-token figures.
- Determinism: the same scenario and seed give identical records and summary metrics, run
  after run, under a CPU burner, and with any ``--workers``.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from agentbench.errors import InputError
from agentbench.metrics import summarize
from agentbench.replay import run
from agentbench.scenario.loading import load_scenario
from agentbench.scenario.model import Scenario
from tests.helpers import SCENARIOS

QUICKSTART = SCENARIOS / "quickstart.yaml"
# a tree with two subagents, each joined before the next (no two requests of one tree
# race for the same cached prefix, so cached tokens do not depend on the wall clock's
# timing), and two plain ones
TREES = ["trace_0279", "trace_0138", "trace_0693"]


def _scenario(weka_dir: Path, out: Path, clock: str, run_id: str) -> Scenario:
    return Scenario.model_validate({
        "name": "both-ways", "seed": 3, "clock": clock,
        "endpoints": [{"kind": "simulated", "preset": "instant", "instances": 2,
                       "router": "session_affinity"}],
        "trace": {"kind": "file", "source": str(weka_dir), "format": "weka",
                  "filters": {"sessions": TREES},
                  "transform": {"scale": 0.05}},
        "load": {"kind": "lanes", "concurrency": 3},
        "timing": {"strategy": "think-only", "time_scale": 0.001},
        "limits": {"max_sessions": 3, "recycle": False},
        "output": {"dir": str(out), "run_id": run_id}})


def _per_session(run_dir: Path) -> dict[str, list[tuple[Any, ...]]]:
    df = pq.read_table(run_dir / "requests.parquet").to_pandas().sort_values("sent_ns",
                                                                             kind="stable")
    out: dict[str, list[tuple[Any, ...]]] = {}
    for r in df.itertuples():
        out.setdefault(f"{r.tree_id}/{r.session_id}", []).append(
            (r.turn, r.status, r.prompt_tokens, r.completion_tokens, r.cached_tokens,
             r.expected_input_tokens))
    return out


def test_wall_and_virtual_send_the_same_requests(weka_dir: Path, tmp_path: Path) -> None:
    wall = run(_scenario(weka_dir, tmp_path, "wall", "wall"), progress=False).run_dir
    virt = run(_scenario(weka_dir, tmp_path, "virtual", "virtual"), progress=False).run_dir
    a, b = _per_session(wall), _per_session(virt)
    n = sum(map(len, a.values()))
    assert n > 50 and len(a) > len(TREES)  # subagents ran as their own sessions
    assert all(row[1] == "ok" for rows in a.values() for row in rows)
    assert sum(row[4] for rows in a.values() for row in rows) > 0  # the cache was hit
    assert a == b
    assert json.loads((virt / "run.json").read_text())["time_base"] == "virtual"
    assert summarize(virt)["time_base"]["kind"] == "virtual"
    assert summarize(wall)["time_base"]["kind"] == "simulated"


def _same_run(a: Path, b: Path) -> None:
    for f in ("requests.parquet", "sessions.parquet", "server_metrics.parquet"):
        ta, tb = pq.read_table(a / f), pq.read_table(b / f)
        assert ta.num_rows > 0 and ta.equals(tb), f
    sa, sb = summarize(a), summarize(b)
    sa.pop("run"), sb.pop("run")
    assert sa == sb


def _burn(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def test_quickstart_is_deterministic(weka_dir: Path, tmp_path: Path) -> None:
    """Twice in a row, once with every core busy with a CPU burner, once with 2 workers:
    the same records (timestamps included) and the same summary metrics."""
    sc = load_scenario(QUICKSTART)
    runs = []
    for rid, workers, burn in (("a", 1, False), ("b", 1, False), ("c", 1, True),
                               ("d", 2, False)):
        sc.output.dir, sc.output.run_id = str(tmp_path / "out"), rid
        stop = multiprocessing.Event()
        burners = [multiprocessing.Process(target=_burn, args=(stop,))
                   for _ in range(2 if burn else 0)]
        for p in burners:
            p.start()
        try:
            runs.append(run(sc, progress=False, workers=workers).run_dir)
        finally:
            stop.set()
            for p in burners:
                p.join(10)
    for other in runs[1:]:
        _same_run(runs[0], other)
    s = summarize(runs[0])
    assert s["overall"]["requests"]["ok"] == 274
    # ITL and TPOT are the simulator's per-token step times, not 0
    assert s["overall"]["latency"]["itl_ms"]["p50"] > 1.0
    info = json.loads((runs[3] / "run.json").read_text())
    assert info["workers"] == 1 and "ignored" in info["workers_note"]
    # what it ignores must still be a count or auto (--workers abc passed without a word)
    for bad in ("abc", 0):
        sc.output.run_id = f"bad-{bad}"
        with pytest.raises(InputError, match="workers must be"):
            run(sc, progress=False, workers=bad)
        assert not (tmp_path / "out" / f"bad-{bad}").exists()


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_virtual_prompt_tokens_are_the_trace_s(weka_dir: Path, tmp_path: Path,
                                               api: str) -> None:
    sc = _scenario(weka_dir, tmp_path, "virtual", api)
    sc.endpoints[0].api = api
    d = run(sc, progress=False).run_dir
    df = pq.read_table(d / "requests.parquet").to_pandas()
    assert (df["prompt_tokens"] == df["expected_input_tokens"]).all()
    assert (df["completion_tokens"] == df["expected_output_tokens"].clip(lower=1)).all()


def test_clock_dependent_defaults_survive_variants() -> None:
    """No idle cap and a 10 s metrics interval in virtual time, unless set (by the base
    or a variant); 10 s / 1 s on the wall clock."""
    from agentbench.scenario.loading import expand_variants

    base = Scenario.model_validate({
        "name": "v", "endpoints": [{"kind": "simulated"}],
        "trace": {"kind": "synth", "profile": "codex", "sessions": 2},
        "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 5},
        "variants": [{"name": "a"}, {"name": "b", "set": {"timing.idle_cap_s": 5}},
                     {"name": "c", "set": {"server_metrics": {"interval_s": 2}}}]})
    a, b, c = expand_variants(base)
    assert a.timing.idle_cap_for("virtual") is None and a.timing.idle_cap_for("wall") == 10
    assert b.timing.idle_cap_for("virtual") == 5
    assert a.server_metrics.interval_for("virtual") == 10
    assert a.server_metrics.interval_for("wall") == 1
    assert c.server_metrics.interval_for("virtual") == 2


def test_callbacks_due_at_one_instant_run_in_the_order_scheduled() -> None:
    import asyncio
    import random

    from agentbench.replay.clock import VIRTUAL, run_on

    rng = random.Random(5)
    plan = [(rng.choice([1.0, 2.0, 2.5, 7.0]), i) for i in range(400)]
    ran: list[tuple[float, int]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        for when, i in plan:
            loop.call_at(when, ran.append, (when, i))
        loop.call_at(8.0, done.set_result, None)
        await done

    run_on(VIRTUAL, main())
    # asyncio's own heap leaves ties in whatever order its layout gives
    assert ran == sorted(plan)


def test_a_callback_never_runs_before_its_own_nanosecond() -> None:
    """Timers less than 1 ns apart but in different nanoseconds run each at its own time
    (they used to run in one turn at the earlier one's, so a simulator step committed
    there stamped its tokens 1 ns early, unlike the same step inside a decode run);
    timers of one nanosecond still share a turn."""
    import asyncio

    from agentbench.replay.clock import VIRTUAL, run_on

    seen: list[tuple[str, int]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        for name, when in (("a", 1.0000000004), ("b", 1.0000000009), ("c", 1.0000000011)):
            loop.call_at(when, lambda n=name: seen.append((n, loop.now_ns())))  # type: ignore[attr-defined,misc]
        loop.call_at(2.0, done.set_result, None)
        await done

    run_on(VIRTUAL, main())
    assert seen == [("a", 1_000_000_000), ("b", 1_000_000_001), ("c", 1_000_000_001)]


def test_decode_run_length_does_not_change_a_pd_run(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two prefills that end in one step reach their decode instance at one instant; the
    order they queue in there must not depend on how many steps the other instances'
    decode runs cover (it once did, through the loop's timer heap). One step a run is
    stepping one step at a time: routing, hand-overs and KV arrivals cut only the runs of
    the instances they change, and the records are still those of stepping."""
    from agentbench.scenario.loading import expand_variants
    from agentbench.sim import virtual

    sc = next(v for v in expand_variants(load_scenario(SCENARIOS / "pd-ratio.yaml"))
              if v.name.endswith("codex-p2d6"))
    dirs = []
    for steps in (1, 32, 256):
        monkeypatch.setattr(virtual, "RUN_STEPS", steps)
        v = sc.model_copy(deep=True)
        v.output.dir, v.output.run_id = str(tmp_path), f"steps-{steps}"
        dirs.append(run(v, progress=False).run_dir)
    _same_run(dirs[0], dirs[1])
    _same_run(dirs[1], dirs[2])


def test_a_warm_up_longer_than_the_duration_still_ends_the_stage_on_time(
        tmp_path: Path) -> None:
    """``warmup.max_s`` far above ``duration_s``: the stage measures from the instant its
    last lane turned warm and ends ``duration_s`` later, whatever bounds the warm-up (a
    stage that waited for its warm-up's bound instead ran 15x past its duration)."""
    sc = load_scenario(SCENARIOS / "quickstart.yaml")
    data = sc.model_dump(mode="json")
    data["limits"] = {**data["limits"], "duration_s": 200, "recycle": True}
    data["warmup"] = {"enabled": True, "requests_per_lane": 3, "max_s": 3000}
    data["output"] = {**data["output"], "dir": str(tmp_path)}
    res = run(Scenario.model_validate(data), progress=False)
    stage = json.loads((res.run_dir / "run.json").read_text())["stages"][0]
    assert stage["profile_start_ns"] is not None and stage["profile_start_ns"] > 0
    measured_s = (stage["end_ns"] - stage["profile_start_ns"]) / 1e9
    assert 200 <= measured_s < 260, measured_s


def test_a_stage_stopped_during_warm_up_starts_profiling_at_the_stop(tmp_path: Path) -> None:
    """The request budget runs out while lanes still warm up: the profiling start is the
    instant the stage stopped (the last request's send), not the end of the requests still
    in flight (nor a look up to 0.1 s after the stop, as when the warm-up was polled)."""
    sc = load_scenario(SCENARIOS / "quickstart.yaml")
    data = sc.model_dump(mode="json")
    data["limits"] = {**data["limits"], "max_requests": 5, "duration_s": 1000,
                      "recycle": True}
    data["warmup"] = {"enabled": True, "requests_per_lane": 3, "random_start": False}
    data["output"] = {**data["output"], "dir": str(tmp_path)}
    res = run(Scenario.model_validate(data), progress=False)
    stage = json.loads((res.run_dir / "run.json").read_text())["stages"][0]
    req = pq.read_table(res.run_dir / "requests.parquet").to_pandas()
    assert len(req) == 5 and (req.phase == "warmup").all()
    last_sent = int(req.sent_ns.max())
    assert stage["profile_start_ns"] == last_sent < int(req.end_ns.max())


def test_a_tokenizer_is_not_loaded_in_virtual_time(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``prompt.tokenizer`` has no effect in virtual time (validate warns so: prompts reach
    the simulator as block hashes), yet the run loaded it: a hub id took 26 s of retries
    and then refused the run, exit 2. It is not loaded now; the records are the same."""
    from agentbench.prompts import vocab

    def refused(name: str) -> None:
        raise InputError("no such tokenizer file", source=name, field="tokenizer")

    monkeypatch.setattr(vocab, "vocab_from_tokenizer", refused)
    data = {"name": "tok", "seed": 0,
            "endpoints": [{"kind": "simulated", "preset": "instant"}],
            "trace": {"kind": "synth", "profile": "codex", "sessions": 2},
            "load": {"kind": "lanes", "concurrency": 1}, "limits": {"max_requests": 4},
            "output": {"dir": str(tmp_path), "run_id": "plain"}}
    plain = run(Scenario.model_validate(data), progress=False).run_dir
    data["prompt"] = {"tokenizer": "/nowhere/tokenizer.json"}
    data["output"]["run_id"] = "tok"  # type: ignore[index]
    tok = run(Scenario.model_validate(data), progress=False).run_dir
    assert json.loads((tok / "run.json").read_text())["status"] == "completed"
    assert pq.read_table(tok / "requests.parquet").drop(["request_id"]).equals(
        pq.read_table(plain / "requests.parquet").drop(["request_id"]))
