"""Lanes sharded over worker processes: the same request set and prompts as one process,
one clock base, results merged into one folder, Ctrl-C leaving every finished request on
disk; and the pieces (shared tree sequence, shards, merge) on their own."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from agentbench.replay import run_scenario
from agentbench.replay.stages import STATE_SLOTS, Shard, TreeSource
from agentbench.replay.workers import resolve_workers
from agentbench.results import schema as records
from agentbench.results.spool import WORKERS_DIR, merge_parts
from agentbench.results.writer import ResultsWriter
from agentbench.testing.fakeserver import FakeServer, ServerConfig
from tests.helpers import (
    ROOT,
    WEKA_TREES,
    fastserver,
    openai_scenario,
    small_outputs,
    write_scenario,
)

#: as tests/replay/test_replay_run.py's: 3 lanes, server metrics every 0.2 s unless set
scenario = functools.partial(openai_scenario, concurrency=3, server_metrics={"interval_s": 0.2})


async def _replay(trace: Any, out: Path, workers: int | str,
                  cfg: ServerConfig | None = None, **over: Any) -> tuple[Any, Any, Any]:
    """Run against a fresh fake server; return (run result, requests, server's log)."""
    srv = FakeServer(cfg or ServerConfig())
    await srv.start()
    try:
        sc = scenario([srv.url], out, output={"dir": str(out), "run_id": f"w{workers}"},
                      server_metrics={"enabled": False}, **over)
        res = await asyncio.wait_for(run_scenario(sc, trace=trace, progress=False,
                                                  workers=workers), 100)
    finally:
        await srv.close()
    req = pq.read_table(res.run_dir / records.REQUESTS_FILE).to_pandas()
    return res, req, srv.received


def _prompts(req: Any, received: list[Any]) -> dict[tuple[str, str, int], str]:
    """(tree, session, turn) -> digest of the body the server got."""
    ids = {int(r.request_id): (r.tree_id, r.session_id, int(r.turn)) for r in req.itertuples()}
    return {ids[int(r.headers["X-Request-ID"])]: hashlib.sha1(r.body).hexdigest()
            for r in received}


@pytest.mark.timeout(120)
async def test_workers_send_the_single_process_requests_on_one_clock(weka_trace: Any,
                                                                     tmp_path: Path) -> None:
    # three trees with subagents, recycled into copies: 5 trees over 3 lanes
    trace = small_outputs(weka_trace, WEKA_TREES, scale=0.05)
    limits = {"recycle": True, "max_sessions": 5}
    one, req1, got1 = await _replay(trace, tmp_path, 1, limits=limits)
    two, req2, got2 = await _replay(trace, tmp_path, 2, limits=limits)

    # the same trees, copies, sessions and turns, with byte-identical prompts
    assert len(req2) == len(req1) == len(got2) > 0
    assert (req2.status == "ok").all()
    p1, p2 = _prompts(req1, got1), _prompts(req2, got2)
    assert p1 == p2
    assert set(req2.tree_id) == set(req1.tree_id) and req2.tree_id.str.endswith("#1").any()

    # merged: unique request ids, both workers' lanes, sessions complete, no part left
    assert req2.request_id.is_unique
    ses1 = pq.read_table(one.run_dir / records.SESSIONS_FILE).to_pandas()
    ses2 = pq.read_table(two.run_dir / records.SESSIONS_FILE).to_pandas()
    assert sorted(zip(ses2.tree_id, ses2.session_id, strict=True)) == sorted(
        zip(ses1.tree_id, ses1.session_id, strict=True))
    assert set(req2.lane) == {0, 1, 2}
    assert not (two.run_dir / WORKERS_DIR).exists()
    info = json.loads((two.run_dir / records.RUN_FILE).read_text())
    assert info["workers"] == 2 and info["status"] == "completed"
    assert info["requests_written"] == len(req2)
    assert len(info["client_health"]["workers"]) == 2

    # one clock: every worker's first turn is scheduled after the stage start the parent
    # stamped (a worker counting from its own, later, start would put it before), and the
    # server saw each request (perf_counter_ns, its own reading) after the record's sent_ns
    # on the parent's base, and soon after
    stage_start = info["stages"][0]["start_ns"]
    assert (req2.scheduled_ns >= stage_start).all()
    assert (req2.groupby(req2.lane % 2).scheduled_ns.min() - stage_start < 5e9).all()
    t0 = info["clock"]["t0_perf_ns"]
    sent = {int(r.request_id): int(r.sent_ns) for r in req2.itertuples()}
    gaps_ms = [(r.t_ns - t0 - sent[int(r.headers["X-Request-ID"])]) / 1e6 for r in got2]
    assert min(gaps_ms) >= 0, min(gaps_ms)
    assert max(gaps_ms) < 500, max(gaps_ms)


@pytest.mark.timeout(120)
async def test_workers_share_the_request_budget_and_stages(weka_trace: Any, tmp_path: Path) -> None:
    trace = small_outputs(weka_trace, WEKA_TREES, scale=0.05)
    res, req, got = await _replay(trace, tmp_path, 2, load={"kind": "lanes",
                                                            "concurrency": [2, 4]},
                                  limits={"recycle": True, "max_requests": 12})
    assert list(req.groupby("stage").size().sort_index()) == [12, 12]
    assert len(got) == 24
    info = res.info
    assert [s["label"] for s in info["stages"]] == ["c=2", "c=4"]
    assert info["stages"][0]["end_ns"] <= info["stages"][1]["start_ns"]
    # each stage starts on fresh copies, as in one process
    first = set(req[req.stage == "c=2"].tree_id)
    assert not first & set(req[req.stage == "c=4"].tree_id)


@pytest.mark.timeout(120)
async def test_workers_start_profiling_when_every_lane_is_warm(weka_trace: Any,
                                                              tmp_path: Path) -> None:
    # lanes 0 and 2 in one worker, 1 and 3 in the other: the profiling phase (duration_s)
    # starts once, for both, when the last lane's last warmup request ended
    trace = small_outputs(weka_trace, WEKA_TREES, scale=0.05)
    res, req, _ = await _replay(
        trace, tmp_path, 2, load={"kind": "lanes", "concurrency": 4},
        warmup={"enabled": True, "random_start": False, "requests_per_lane": 2},
        timing={"time_scale": 0.02},
        limits={"recycle": True, "duration_s": 1.5, "on_deadline": "cancel"})
    (st,) = res.info["stages"]
    req = req.sort_values("sent_ns")
    last_warm = max(int(g.end_ns.iloc[:2].max()) for _, g in req.groupby("lane"))
    assert last_warm <= st["profile_start_ns"] <= last_warm + 50_000_000
    assert st["profile_start_ns"] > st["start_ns"]
    assert req.sent_ns.max() <= st["profile_start_ns"] + 1.5e9
    # warmup until then in both workers, measured from then on (a request another worker
    # was sending at that instant may go out a moment later as warmup)
    before = req.sent_ns < st["profile_start_ns"]
    assert (req.phase[before] == "warmup").all() and (~before).sum() > 0
    assert (req.sent_ns[req.phase == "warmup"] < st["profile_start_ns"] + 5e6).all()


@pytest.mark.timeout(120)
async def test_open_loop_arrivals_are_split_not_duplicated(weka_trace: Any, tmp_path: Path) -> None:
    trace = small_outputs(weka_trace, WEKA_TREES, scale=0.05)
    load = {"kind": "rate", "arrival": "constant", "rate_per_s": 50.0}
    limits = {"recycle": True, "max_sessions": 4}
    _, req1, got1 = await _replay(trace, tmp_path, 1, load=load, limits=limits)
    _, req2, got2 = await _replay(trace, tmp_path, 2, load=load, limits=limits)
    assert _prompts(req1, got1) == _prompts(req2, got2)
    assert sorted(set(req2.lane)) == [0, 1, 2, 3]


@pytest.mark.timeout(120)
def test_ctrl_c_with_workers_leaves_every_finished_request_on_disk(
        fast_server: str, weka_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "res"
    sc = write_scenario(tmp_path / "s.yaml", fast_server, out, weka_dir,
                        "limits: {duration_s: 600}")
    # SIGINT as a terminal delivers it, even when the test run itself was started in the
    # background of a script (which leaves SIGINT ignored in every child)
    proc = subprocess.Popen([sys.executable, "-m", "agentbench.cli", "run", str(sc),
                             "--no-progress", "--workers", "2"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    parts = [out / "r" / WORKERS_DIR / f"w{w}" / (records.REQUESTS_FILE + ".spool.arrows")
             for w in (0, 1)]
    deadline = time.monotonic() + 90
    while not all(p.exists() and p.stat().st_size > 0 for p in parts):  # both wrote rows
        assert time.monotonic() < deadline and proc.poll() is None, "run never wrote rows"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    run = json.loads((out / "r" / records.RUN_FILE).read_text())
    assert run["status"] == "interrupted" and run["workers"] == 2
    req = pq.read_table(out / "r" / records.REQUESTS_FILE).to_pandas()
    assert run["requests_written"] == len(req) and req.request_id.is_unique
    assert set(req.lane) == {0, 1}
    # every request the server received has its row (finished, or cancelled in flight)
    import urllib.request

    with urllib.request.urlopen(fast_server + "/metrics", timeout=10) as r:
        served = int(r.read().decode().split()[-1])
    streamed = served - 3  # the parent's start-up requests: ignore_eos probe, calibration x2
    assert len(req) >= streamed > 0
    assert set(req.status) <= {records.OK, records.CANCELLED}
    assert not (out / "r" / WORKERS_DIR).exists()


def test_shared_tree_sequence_positions_copies_and_ordinals() -> None:
    specs: list[Any] = ["a", "b", "c"]
    state = [0] * STATE_SLOTS
    src, other = TreeSource(specs, True, state), TreeSource(specs, True, state)
    got = [src.next(), other.next(), src.next(), other.next()]
    assert got == [("a", 0, 0), ("b", 0, 1), ("c", 0, 2), ("a", 1, 3)]
    assert src.next(limit=4) is None  # four trees this stage
    src.restart()  # the next stage: copies never used before, ordinals go on
    assert other.next() == ("a", 2, 4)
    assert src.at(2) == ("c", 2, 6)  # open loop: arrival 2 of the stage
    once = TreeSource(specs, False)
    assert [once.next(), once.next(), once.next(), once.next()][-1] is None


def test_shard_lanes_and_caps() -> None:
    assert Shard(0, 2).lanes(5) == [0, 2, 4] and Shard(1, 2).lanes(5) == [1, 3]
    assert Shard(1, 3).lanes(1) == []
    assert [Shard(w, 3).cap(7) for w in range(3)] == [3, 2, 2]


def test_resolve_workers() -> None:
    sc = scenario(["http://x"], Path("."), load={"kind": "lanes", "concurrency": [2, 8]})
    assert resolve_workers(1, sc) == 1 and resolve_workers("3", sc) == 3
    assert resolve_workers(64, sc) == 8  # never more than lanes
    assert 1 <= resolve_workers("auto", sc) <= len(os.sched_getaffinity(0))
    from agentbench.errors import InputError

    for bad in ("0", "many"):
        with pytest.raises(InputError):
            resolve_workers(bad, sc)


def test_a_worker_count_past_the_bound_is_one_line_before_the_run(tmp_path: Path) -> None:
    """An open loop has no lanes to bound ``--workers`` by: 2**70 was a traceback from
    the shared memory's size (OverflowError, run.json ``crashed``), and 100,000 would have
    started that many processes."""
    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.errors import InputError
    from agentbench.replay.workers import MAX_WORKERS

    rate = scenario(["http://x"], tmp_path, load={"kind": "rate", "rate_per_s": 1.0})
    assert resolve_workers(MAX_WORKERS, rate) == MAX_WORKERS == 1024
    for bad in (MAX_WORKERS + 1, 2**70, str(2**70)):
        with pytest.raises(InputError, match="at most 1,024 worker processes"):
            resolve_workers(bad, rate)
    r = CliRunner().invoke(app, ["run", "--url", "http://127.0.0.1:9", "--model", "m",
                                 "--rate", "1", "--max-requests", "4", "--workers",
                                 str(2**70), "-o", str(tmp_path / "out")])
    line, = r.output.strip().splitlines()
    assert r.exit_code == 2 and "at most 1,024" in line, r.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_an_open_loops_cap_bounds_the_workers_as_lanes_do(tmp_path: Path) -> None:
    """Each worker of an open loop holds at least one tree of ``max_concurrency`` (its
    share, at least 1): 2 workers under ``max_concurrency: 1`` ran 2 trees at once."""
    capped = scenario(["http://x"], tmp_path, load={"kind": "rate", "rate_per_s": 1.0,
                                                    "max_concurrency": 3})
    assert resolve_workers(8, capped) == 3 and resolve_workers(2, capped) == 2
    assert resolve_workers("auto", capped) <= 3
    free = scenario(["http://x"], tmp_path, load={"kind": "rate", "rate_per_s": 1.0})
    assert resolve_workers(8, free) == 8


def test_ray_load_workers_are_bounded_by_an_open_loops_cap_too(tmp_path: Path) -> None:
    """The bound on shards is one rule for ``--workers`` and for Ray's load workers
    (``plan_nodes`` takes it): an open loop's ``max_concurrency``, as lanes bound a closed
    loop. Ray placed one actor per node's CPU under a cap of 1, each running a tree."""
    from agentbench.replay.raylanes import plan_nodes
    from agentbench.replay.stages import max_shards

    nodes = [{"NodeID": n, "Alive": True, "Resources": {"CPU": 4.0}} for n in "ab"]
    capped = scenario(["http://x"], tmp_path, load={"kind": "rate", "rate_per_s": 1.0,
                                                    "max_concurrency": 1})
    assert max_shards(capped.load) == 1
    assert plan_nodes(nodes, 4, max_shards(capped.load)) == ["a"]
    lanes = scenario(["http://x"], tmp_path, load={"kind": "lanes", "concurrency": [2, 3]})
    assert max_shards(lanes.load) == 3
    free = scenario(["http://x"], tmp_path, load={"kind": "rate", "rate_per_s": 1.0})
    assert max_shards(free.load) is None and len(plan_nodes(nodes, 4, None)) == 8


def test_auto_divides_the_offered_event_rate_by_what_one_process_sustains() -> None:
    from agentbench.replay.autoworkers import EVENTS_PER_WORKER, choose

    per_stream = 400.0  # an AgentX-class decode: ~376 tokens/s per user
    light = choose([per_stream], 64, False, cpus=8)  # 25,600 events/s
    assert light["workers"] == 1 and light["offered_events_per_s"] == 25_600
    heavy = choose([per_stream, 100.0], 256, False, cpus=8)  # the fastest endpoint counts
    assert heavy["workers"] == -(-256 * 400 // EVENTS_PER_WORKER) == 3
    assert choose([per_stream], 1024, False, cpus=4)["workers"] == 4  # capped at the CPUs
    assert choose([per_stream], 1024, True, cpus=4)["workers"] == 3  # the simulator's CPU
    assert choose([per_stream], 2, False, cpus=8)["workers"] == 1  # never more than lanes
    unknown = choose([None], 256, False, cpus=4)
    assert unknown["workers"] == 4 and "no stream rate" in unknown["why"]
    assert choose([per_stream], None, False, cpus=4)["workers"] == 4  # open loop


#: the probe's reading of a 500 events/s stream stays below this (see the test below)
_MAX_PROBE_RATE = 600


@pytest.mark.timeout(120)
async def test_workers_auto_probes_the_stream_rate(weka_trace: Any, tmp_path: Path) -> None:
    from agentbench.replay.autoworkers import choose

    trace = small_outputs(weka_trace, WEKA_TREES, scale=0.05)
    res, req, _ = await _replay(trace, tmp_path, "auto", ServerConfig(itl_s=0.002),  # ~500/s
                                load={"kind": "lanes", "concurrency": 3},
                                limits={"recycle": True, "max_requests": 6})
    pick = res.info["workers_auto"]
    (rate,) = pick["stream_events_per_s"]
    # 2 ms apart on average (500/s). The server paces each event to an absolute time, so an
    # event a busy machine delays is followed by the next at once: the rate, read from
    # the second event on, can come out a few percent above 500 (526 seen under load). A
    # probe that counted each event twice would read ~1,000
    assert 150 < rate < _MAX_PROBE_RATE
    assert abs(pick["offered_events_per_s"] - 3 * rate) <= 1
    assert res.info["workers"] == pick["workers"] == choose([rate], 3, False)["workers"] == 1
    assert pick["why"].startswith("3 lanes x ")
    assert json.loads((res.run_dir / "run.json").read_text())["workers_auto"] == pick
    # the probe is not a row of the run
    assert len(req) == 6 and (req.tree_id != "workers-probe").all()


@pytest.mark.timeout(120)
async def test_workers_auto_probe_does_not_hold_the_run(weka_trace: Any, tmp_path: Path,
                                                       monkeypatch: Any) -> None:
    from agentbench.transport import openai_http

    monkeypatch.setattr(openai_http, "PROBE_TIMEOUT_S", 1.0)
    trace = small_outputs(weka_trace, WEKA_TREES, scale=0.05)

    def stall_probe(n: int, body: dict[str, Any]) -> str | None:  # the probe's 48 tokens
        return "stall" if body.get("max_tokens") == openai_http.PROBE_TOKENS else None

    res, req, _ = await _replay(trace, tmp_path, "auto",
                                ServerConfig(itl_s=0.002, fault=stall_probe, stall_s=5),
                                load={"kind": "lanes", "concurrency": 2},
                                limits={"recycle": True, "max_requests": 4})
    assert len(req) == 4 and req.sent_ns.min() < 5e9  # not held for the stall
    # half the stream came before the stall: its rate is still measured
    (rate,) = res.info["workers_auto"]["stream_events_per_s"]
    assert rate is not None and 150 < rate < _MAX_PROBE_RATE


async def test_a_worker_whose_lanes_ended_waits_for_the_others_warmup() -> None:
    # this worker's lanes all ended (its stage body is done) while another worker's lanes
    # still warm up: the profiling phase starts when that worker's last lane is warm
    # (shared memory), not when this worker ran out of work
    import time
    from types import SimpleNamespace

    from agentbench.replay.stages import _warm
    from agentbench.replay.timers import Timers

    src = TreeSource([], False, [0] * STATE_SLOTS)
    src.restart()
    src.lane_warm(2, 0)  # this worker's one lane of two: warm (and ended)
    body = asyncio.get_running_loop().create_future()
    body.set_result(None)
    ctx = SimpleNamespace(timers=Timers(time.perf_counter_ns(), None), stopping=False)

    async def other_worker() -> None:
        await asyncio.sleep(0.3)
        src.lane_warm(2, ctx.timers.now_ns())

    other = asyncio.ensure_future(other_worker())
    start = await _warm(ctx, src, body, 0, max_s=5.0)  # type: ignore[arg-type]
    await other
    assert start == src.profile_start_ns() and 0.29e9 < start < 2e9
    # with nobody left warming up, the wait ends at max_s
    src.restart()
    t0 = ctx.timers.now_ns()
    start = await _warm(ctx, src, body, t0, max_s=0.3)  # type: ignore[arg-type]
    assert 0.29e9 < start - t0 < 1e9


def test_merge_parts_appends_and_orders_by_end(tmp_path: Path) -> None:
    from agentbench.results.schema import RequestRecord
    from agentbench.testing.fastserver import events
    from agentbench.transport.finish import finish_record

    def rec(i: int, end: int) -> RequestRecord:
        r = RequestRecord(i, "c=1", "measure", "ep", 0, "t#0", "t", "root", 0, i, 10, 5, 1, 0,
                          sent_ns=5, end_ns=end, http_status=200)
        r.chunks = events(True, 1)
        r.chunk_ns = [end] * len(r.chunks)
        return r

    run = tmp_path / "run"
    parts = [run / WORKERS_DIR / "w0", run / WORKERS_DIR / "w1"]
    for d in [run, *parts]:
        d.mkdir(parents=True, exist_ok=True)
    ResultsWriter(run).close()  # the parent: no request rows
    for w, d in enumerate(parts):
        wr = ResultsWriter(d)
        for i in range(3):
            wr.add_request(finish_record(rec(w + 2 * i, 100 * i + w)))
        if w == 0:
            wr.close()
        else:
            wr.flush()  # a worker killed before closing: only its spool is there
    assert merge_parts(run, parts) == 6
    req = pq.read_table(run / records.REQUESTS_FILE).to_pandas()
    assert list(req.end_ns) == [0, 1, 100, 101, 200, 201]
    assert sorted(req.request_id) == [0, 1, 2, 3, 4, 5]
    assert not (run / WORKERS_DIR).exists()


@pytest.mark.timeout(120)
def test_cli_says_what_workers_auto_chose(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.replay.autoworkers import EVENTS_PER_WORKER

    with fastserver("--itl", "0.002") as url:
        r = CliRunner().invoke(app, ["run", "--url", url, "--model",
                                     "m", "--concurrency", "2", "--max-requests", "4",
                                     "--workers", "auto", "--no-progress",
                                     "--set", f"output.dir={tmp_path}"])
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("workers ")]
    assert line.startswith("workers       1 (--workers auto: 2 lanes x ")
    assert line.endswith(f"events/s at most; {EVENTS_PER_WORKER:,} per process)")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("asked", ["", "asyncio"])
def test_a_wall_clock_run_takes_uvloop_when_installed(tmp_path: Path, asked: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`agentbench run` against a live endpoint runs on uvloop when it is installed (as the
    benchmark measures it), on asyncio's loop with AGENTBENCH_LOOP=asyncio, and run.json
    says which; no global event-loop policy is left behind."""
    import asyncio

    from typer.testing import CliRunner

    from agentbench.cli import app

    try:
        import uvloop  # noqa: F401
        have = True
    except ImportError:
        have = False
    expected = "uvloop" if have and asked != "asyncio" else "asyncio"
    monkeypatch.setenv("AGENTBENCH_LOOP", asked)
    policy = type(asyncio.get_event_loop_policy())
    with fastserver("--itl", "0.002") as url:
        r = CliRunner().invoke(app, ["run", "--url", url, "--model",
                                     "m", "--concurrency", "2", "--max-requests", "6",
                                     "--no-progress", "--run-id", "loop",
                                     "--set", "timing.time_scale=0",
                                     "--set", f"output.dir={tmp_path}"])
    assert r.exit_code == 0, r.output
    run = json.loads((tmp_path / "loop" / records.RUN_FILE).read_text())
    assert run["event_loop"] == expected and run["time_base"] == "wall"
    req = pq.read_table(tmp_path / "loop" / records.REQUESTS_FILE).to_pandas()
    assert len(req) == 6 and (req.status == "ok").all() and (req.token_events > 0).all()
    assert type(asyncio.get_event_loop_policy()) is policy
