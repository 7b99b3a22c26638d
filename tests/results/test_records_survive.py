"""Rows agentbench writes are rows agentbench reads: a malformed stream keeps consistent
event columns, and a run an older writer left inconsistent still summarizes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentbench.metrics import summarize
from agentbench.results.schema import RequestRecord
from agentbench.transport.finish import finish_record
from agentbench.transport.sse import parse_stream
from tests.helpers import MS, req, run_and_report, write_run, write_scenario


def _rec(chunks: list[bytes]) -> RequestRecord:
    r = RequestRecord(request_id=0, stage="s", phase="measure", endpoint="e", lane=0,
                      tree_id="t#0", session_id="t", relation="root", copy=0, turn=0,
                      scheduled_ns=0, expected_input_tokens=10, expected_output_tokens=3,
                      potential_cached_tokens=0, sent_ns=0, end_ns=9, http_status=200)
    r.chunks = chunks
    r.chunk_ns = list(range(1, len(chunks) + 1))
    return r


TOKEN = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'


def test_a_malformed_event_keeps_the_rows_columns_consistent() -> None:
    for bad in (b"garbage line\n\n", b"data: [1,2]\n\n",
                b'data: {"usage": nope}\n\n', b'data: {"error": {"message": "x"}}\n\n'):
        row = finish_record(_rec([TOKEN, TOKEN, bad, TOKEN]))
        assert row["status"] == "error" and row["error_type"], bad
        assert len(row["token_event_ns"]) == len(row["token_event_tokens"]) >= 2, bad


def test_usage_counts_that_are_not_integers_are_missing() -> None:
    for v in (b"NaN", b"Infinity", b"2.5", b'"7"', b"true"):
        body = TOKEN + b'data: {"choices":[],"usage":{"prompt_tokens":' + v + \
            b',"completion_tokens":1}}\n\ndata: [DONE]\n\n'
        st = parse_stream([body], [5])
        assert st.prompt_tokens is None and st.completion_tokens == 1, v


def test_rows_an_older_writer_left_inconsistent_still_summarize(tmp_path: Path) -> None:
    r = req(scheduled_ns=0, sent_ns=0, first_token_ns=2 * MS, last_token_ns=6 * MS,
            end_ns=7 * MS, token_events=3, token_event_ns=[2 * MS, 4 * MS, 6 * MS],
            token_event_tokens=[], prompt_tokens=10, completion_tokens=3, cached_tokens=0,
            expected_input_tokens=10)
    s = summarize(write_run(tmp_path / "run", [r]), write=False)
    # one token per event where the counts were lost: ITL = 2 ms, 2 ms
    assert s["overall"]["latency"]["itl_ms"]["count"] == 2
    assert s["overall"]["latency"]["itl_ms"]["p50"] == 2.0


LONG_RUN = """name: long
endpoints: [{kind: simulated, instances: 4, router: round_robin}]
trace: {kind: synth, profile: codex, sessions: 50}
load: {kind: lanes, concurrency: 64}
limits: {duration_s: 36000, recycle: true}
"""


def _start(tmp_path: Path) -> tuple[Any, Path]:
    import subprocess
    import sys
    import time

    (tmp_path / "s.yaml").write_text(LONG_RUN)
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "agentbench.cli", "run", str(tmp_path / "s.yaml"),
                          "-o", str(out), "--run-id", "r"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    spool = out / "r" / "requests.parquet.spool.arrows"
    deadline = time.monotonic() + 60
    while not spool.exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert spool.exists(), "no rows were spooled"
    return p, out / "r"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_killed_run_keeps_its_rows_and_every_reader_reads_it(tmp_path: Path,
                                                               sig: str) -> None:
    import json
    import signal

    import pyarrow.parquet as pq

    from agentbench import load
    from agentbench.cli import app

    p, d = _start(tmp_path)
    p.send_signal(getattr(signal, sig))
    rc = p.wait(60)
    assert rc == (143 if sig == "SIGTERM" else -9)
    if sig == "SIGTERM":  # like Ctrl-C: the run finishes its own files
        assert (d / "requests.parquet").exists() and not (d / "requests.parquet.spool.arrows"
                                                          ).exists()
        assert json.loads((d / "run.json").read_text())["status"] == "interrupted"
    else:  # only the spool is there: any reader finishes the run first
        assert not (d / "requests.parquet").exists()
    r = load(d)
    n = pq.read_metadata(d / "requests.parquet").num_rows
    assert n > 0 and r.summary["overall"]["requests"]["total"] == n
    status = json.loads((d / "run.json").read_text())["status"]
    assert status == ("interrupted" if sig == "SIGTERM" else "killed")
    # every server-metrics sample whole (a SIGKILL leaves most in the journal, one line a
    # sample): every series at each time, as many times as samples were taken then (the
    # sample taken as the run stops may fall at the instant of the last one)
    m = pq.read_table(d / "server_metrics.parquet").to_pandas()
    m["lab"] = m["labels"].map(str)
    series = len(m.drop_duplicates(["name", "lab"]))
    per = m.groupby(["time_ns", "name", "lab"]).size().groupby("time_ns")
    assert per.size().gt(1).sum() > 1 and (per.size() == series).all()
    assert (per.nunique() == 1).all()  # each series taken as often as the others
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["recover", str(d)])
    assert res.exit_code == 0 and "nothing to recover" in res.output


def test_a_run_in_progress_is_not_recovered_under_its_writer(tmp_path: Path) -> None:
    from agentbench import load
    from agentbench.errors import InputError

    p, d = _start(tmp_path)
    try:
        with pytest.raises(InputError, match="still in progress"):
            load(d)
    finally:
        p.kill()
        p.wait(30)


def test_run_exits_1_when_nothing_succeeded_or_too_many_failed(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    base = ("name: x\nendpoints: [{kind: simulated, cache_blocks: CB}]\n"
            "trace: {kind: synth, profile: codex, sessions: 2}\n"
            "load: {kind: lanes, concurrency: 2}\nlimits: {max_requests: 6}\n")
    # 10 blocks of 16 tokens cannot hold a Codex prompt: every request is refused (HTTP 400)
    (tmp_path / "bad.yaml").write_text(base.replace("CB", "10"))
    res = CliRunner().invoke(app, ["run", str(tmp_path / "bad.yaml"), "-o", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "no measured request succeeded" in res.output and "http_400" in res.output
    (tmp_path / "ok.yaml").write_text(base.replace("CB", "100000"))
    res = CliRunner().invoke(app, ["run", str(tmp_path / "ok.yaml"), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output


def test_impossible_usage_is_counted_and_left_out(tmp_path: Path) -> None:
    from agentbench.metrics import format_summary

    def r(prompt: int, cached: int, out: int = 3) -> dict[str, Any]:
        return req(scheduled_ns=0, sent_ns=0, first_token_ns=2 * MS, last_token_ns=6 * MS,
                   end_ns=7 * MS, token_events=3, token_event_ns=[2 * MS, 4 * MS, 6 * MS],
                   token_event_tokens=[1, 1, 1], prompt_tokens=prompt, completion_tokens=out,
                   cached_tokens=cached, expected_input_tokens=1000)

    rows = [r(1000, 400), r(1000, 5000), r(-5, 0), r(1000, 0, out=-3)]
    s = summarize(write_run(tmp_path / "run", rows), write=False)
    o = s["overall"]
    assert o["requests"]["usage_invalid"] == 3
    # only the believable row counts in the hit rate from usage: 400 / 1000
    assert o["hit_rate"]["usage"]["value"] == 0.4
    assert o["tokens"]["input_uncached"] >= 0
    assert "3 requests reported impossible usage" in format_summary(s)


@pytest.mark.timeout(120)
def test_planted_secrets_reach_no_file_and_no_output(fast_server: str, weka_dir: Path,
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL password, custom credential headers, a secret body field and a ``${ENV}``
    value: sent to the API, found in no file of the run, its report, or the terminal."""


    secrets = ["pw-SECRET-1", "tok-SECRET-2", "SECRET-3-subscription", "SECRET-4-body",
               "SECRET-5-from-env", "SECRET-6-query"]
    monkeypatch.setenv("AB_TENANT", secrets[4])
    url = fast_server.replace("http://", f"http://alice:{secrets[0]}@") + \
        f"?api-key={secrets[5]}"
    sc = write_scenario(tmp_path / "s.yaml", url, tmp_path / "res", weka_dir,
                        "limits: {max_requests: 6}\n")
    text = sc.read_text().replace("    ignore_eos: null\n", "    ignore_eos: null\n"
                                  f"    headers: {{X-Auth-Token: {secrets[1]}, "
                                  f"Ocp-Apim-Subscription-Key: {secrets[2]}, "
                                  "User-Agent: my-agent}\n"
                                  f"    extra_body: {{api_token: {secrets[3]}, top_p: 0.9, "
                                  "tenant: '${AB_TENANT}'}\n")
    sc.write_text(text)
    run_dir = tmp_path / "res" / "r"
    files, output = run_and_report(sc, run_dir)
    assert any(f.name == "report.html" for f in files)
    for f in files:
        data = f.read_bytes()
        for s in secrets:
            assert s.encode() not in data, (f.name, s)
    for s in secrets:
        assert s not in output
    import json

    ep = json.loads((run_dir / "run.json").read_text())["scenario"]["endpoints"][0]
    # only harmless headers keep their values
    assert ep["headers"]["User-Agent"] == "my-agent"
    assert ep["headers"]["X-Auth-Token"] == "<redacted>"
    assert ep["extra_body"] == {"api_token": "<redacted>", "top_p": 0.9,
                                "tenant": "${AB_TENANT}"}
    assert ep["url"].startswith("http://<redacted>@127.0.0.1:")


@pytest.mark.parametrize("yaml_text, where", [
    ("load: {kind: lanes, concurrency: true}", "load.concurrency"),
    ("load: {kind: lanes, concurrency: 100000000}", "concurrency values must be at most"),
    ("load: {kind: lanes, concurrency: 2}\nendpoints: [{kind: openai, url: 'http://x', "
     "model: m, timeout_s: .inf}]", "timeout_s"),
    ("load: {kind: lanes, concurrency: 2}\nload: {kind: lanes, concurrency: 3}",
     "given twice"),
    ("load: {kind: lanes, concurrency: 2}\noutput: {run_id: ../../x}", "output.run_id"),
    ("load: {kind: lanes, concurrency: 2}\nvariants: [{name: 'a/b', set: {seed: 1}}]",
     "variants.0.name: must be a plain name"),
    ("load: {kind: lanes, concurrency: 2}\ntiming: {time_scale: .nan}", "timing.time_scale"),
    ("load: {kind: lanes, concurrency: 2}\nendpoints: [{kind: openai, url: "
     "'http://x:99999', model: m}]", "not a usable URL"),
])
def test_bad_scenario_values_are_one_clear_error(tmp_path: Path, yaml_text: str,
                                                 where: str) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    base = "name: x\ntrace: {kind: synth, profile: codex, sessions: 2}\n"
    if "endpoints" not in yaml_text:
        base += "endpoints: [{kind: simulated}]\n"
    (tmp_path / "s.yaml").write_text(base + yaml_text + "\n")
    res = CliRunner().invoke(app, ["validate", str(tmp_path / "s.yaml")])
    assert res.exit_code == 2, res.output
    assert where in res.output and "Traceback" not in res.output


def test_unreadable_scenario_files_and_output_folders_are_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    runner = CliRunner()
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00binary\x00")
    res = runner.invoke(app, ["validate", str(tmp_path / "bin.yaml")])
    assert res.exit_code == 2 and "not a text" in res.output, res.output
    (tmp_path / "afile").write_text("x")
    (tmp_path / "s.yaml").write_text(
        "name: x\nendpoints: [{kind: simulated}]\n"
        "trace: {kind: synth, profile: codex, sessions: 1}\n"
        f"load: {{kind: lanes, concurrency: 1}}\nlimits: {{max_requests: 2}}\n"
        f"output: {{dir: {tmp_path / 'afile'}}}\n")
    res = runner.invoke(app, ["run", str(tmp_path / "s.yaml")])
    assert res.exit_code == 2 and "is a file, not a folder" in res.output, res.output


@pytest.mark.parametrize("content", [
    b"\xff\xfe\x00\x01binary\x00" * 50,
    b'\xff\xfe{"a":1}\n',
    b'{"timestamp": 0, "input_length": NaN, "output_length": 5, "hash_ids": [1]}\n',
    b'{"timestamp": 0, "input_length": Infinity, "output_length": 5, "hash_ids": [1]}\n',
    b'{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": ["a"]}\n',
])
def test_bad_traces_are_one_line(tmp_path: Path, content: bytes) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    (tmp_path / "t.jsonl").write_bytes(content)
    res = CliRunner().invoke(app, ["traces", "stats", str(tmp_path / "t.jsonl")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "t.jsonl" in lines[0]


def test_filters_that_match_nothing_are_refused_before_the_run(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    base = """name: nm
endpoints: [{kind: simulated, instances: 1}]
trace: {kind: synth, profile: codex, sessions: 3, filters: {FILTERS}}
load: {kind: lanes, concurrency: 2}
limits: {max_requests: 5}
"""
    for filters, says in [("sessions: [nope, codex-000001]",
                           "field 'trace.filters.sessions': 1 of 2 sessions are not root"),
                          ("min_turns: 100000",
                           "field 'trace.filters': no session tree of the 3 in the trace "
                           "passes the filters (min_turns: 100000)")]:
        sc = tmp_path / "s.yaml"
        sc.write_text(base.replace("FILTERS", filters))
        r = CliRunner().invoke(app, ["run", str(sc), "-o", str(tmp_path / "out")])
        assert r.exit_code == 2, r.output
        assert f"error: {sc}: {says}" in r.output
        assert not (tmp_path / "out").exists()  # nothing ran, no run folder


def test_env_markers_are_expanded_where_sent_and_named_when_unset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbench.errors import InputError
    from agentbench.scenario.model import OpenAIEndpoint
    from agentbench.scenario.secrets import expand_env, secrets_of

    monkeypatch.setenv("AB_K", "value-of-k-123")
    found: list[str] = []
    assert expand_env({"a": ["x-${AB_K}", 3], "b": "$AB_K"}, "extra_body", found) == \
        {"a": ["x-value-of-k-123", 3], "b": "$AB_K"}
    assert found == ["value-of-k-123"]
    cfg = OpenAIEndpoint.model_validate({"url": "http://h:1", "model": "m",
                                         "extra_body": {"tenant": "${AB_K}"}})
    assert "value-of-k-123" in secrets_of(cfg)  # redacted wherever it could show
    monkeypatch.delenv("AB_K")
    with pytest.raises(InputError, match=r"field 'extra_body.a.0': environment variable "
                                         r"AB_K is not set"):
        expand_env({"a": ["${AB_K}"]}, "extra_body")


def test_a_killed_runs_server_metrics_come_back_from_the_journal(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from agentbench.results import schema as records
    from agentbench.results.writer import ResultsWriter, recover

    w = ResultsWriter(tmp_path)
    w.add_server_samples([{"time_ns": i, "endpoint": "e", "name": "vllm:hits",
                           "labels": [("model", "m"), ("pod", str(i))], "value": float(i)}
                          for i in range(3)])
    # no close(): killed before any batch reached the spool
    assert records.SERVER_METRICS_FILE in recover(tmp_path)
    t = pq.read_table(tmp_path / records.SERVER_METRICS_FILE).to_pylist()
    assert [r["value"] for r in t] == [0.0, 1.0, 2.0]
    assert t[2]["labels"] == [("model", "m"), ("pod", "2")]


def test_a_damaged_batch_in_a_left_spool_is_left_out_not_a_crash(tmp_path: Path) -> None:
    """A spool another process left, with one batch whose string offsets go backwards
    (bytes damaged on disk; reading such a batch unchecked can crash the process):
    recovery leaves that batch out, keeps the batches around it and the journal's rows,
    numbered after all three batches."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    from agentbench.results import schema as records
    from agentbench.results.spool import JOURNAL_SUFFIX, SPOOL_SUFFIX
    from agentbench.results.writer import recover

    schema = records.SERVER_METRICS_SCHEMA

    def batch(first: int, n: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist(
            [{"time_ns": first + i, "endpoint": "e", "name": "m", "labels": None,
              "value": float(first + i)} for i in range(n)], schema=schema)

    good = batch(10, 2)
    offsets = pa.py_buffer(np.array([0, 2, 1], dtype=np.int32).tobytes())
    bad_name = pa.StringArray.from_buffers(2, offsets, pa.py_buffer(b"mm"))
    bad = pa.RecordBatch.from_arrays(
        [good.column(0), good.column(1), bad_name, good.column(3), good.column(4)],
        schema=schema)
    with pytest.raises(pa.ArrowInvalid):
        bad.validate(full=True)
    name = records.SERVER_METRICS_FILE
    with ipc.new_stream(str(tmp_path / (name + SPOOL_SUFFIX)), schema) as out:
        out.write_batch(batch(0, 2))
        out.write_batch(bad)
        out.write_batch(batch(20, 2))
    # the journal's rows after the spool's six (one already spooled: seq 5)
    (tmp_path / (name + JOURNAL_SUFFIX)).write_text("".join(
        f'{seq} {{"time_ns": {t}, "endpoint": "e", "name": "m", "labels": null, '
        f'"value": {t}.0}}\n' for seq, t in ((5, 21), (6, 30))))
    assert name in recover(tmp_path)
    t = pq.read_table(tmp_path / name)
    assert t.column("time_ns").to_pylist() == [0, 1, 20, 21, 30]


async def test_an_unset_env_marker_is_refused_before_the_endpoint_is_reached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unset ``${NAME}`` in ``extra_body`` is the run's one error, before any connection
    opens (the pre-run check against a port nobody answers at would fail otherwise), and
    ``check_scenario`` (``agentbench validate``) warns of it as of an unset API key."""
    from agentbench.errors import InputError
    from agentbench.replay import run_scenario
    from agentbench.scenario.loading import check_scenario
    from tests.helpers import free_port, openai_scenario
    from tests.replay.test_replay_faults import trace

    monkeypatch.delenv("AB_UNSET_9", raising=False)
    sc = openai_scenario(f"http://127.0.0.1:{free_port()}", tmp_path, name="env",
                         named=False, endpoint={"extra_body": {"user_auth": "${AB_UNSET_9}"},
                                                "headers": {"X-T": "a ${AB_UNSET_9}"}})
    _, warnings = check_scenario(sc, tmp_path)
    assert [w for w in warnings if "AB_UNSET_9" in w] == [
        "endpoints.0.headers: environment variable AB_UNSET_9 is not set (the run refuses "
        "to start without it)",
        "endpoints.0.extra_body: environment variable AB_UNSET_9 is not set (the run "
        "refuses to start without it)"]
    with pytest.raises(InputError, match=r"endpoints\[0\]: field 'extra_body.user_auth': "
                                         r"environment variable AB_UNSET_9 is not set"):
        await run_scenario(sc, trace=trace(2), progress=False)
    sc.endpoints[0].extra_body = {}
    with pytest.raises(InputError, match=r"endpoints\[0\]: field 'headers.X-T': "
                                         r"environment variable AB_UNSET_9 is not set"):
        await run_scenario(sc, trace=trace(2), progress=False)


def test_recover_on_a_folder_that_is_no_run_is_one_line_not_nothing_to_do(
        tmp_path: Path) -> None:
    """``agentbench recover`` on a mistyped folder (empty, or holding other files) said
    'nothing to recover' and exited 0; it is no run folder, so one line and exit 2."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    (tmp_path / "other.txt").write_text("x")
    for d in (tmp_path, tmp_path / "empty"):
        d.mkdir(exist_ok=True)
        res = CliRunner().invoke(app, ["recover", str(d)])
        assert res.exit_code == 2, res.output
        assert "no run.json" in res.output and res.output.count("\n") == 1, res.output
