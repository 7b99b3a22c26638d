"""The recorder against faults: usage no request can have loses that call's usage (or, in
a journal, that call), never the recording; a link planted where the trace is written is
not followed; the upstream's ``user:password`` is neither printed nor a 500 for clients
that send their own Authorization; a long response is relayed with bounded memory."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agentbench.proxy import RecordConfig, rebuild, start_proxy
from agentbench.proxy.store import journal_path, read_meta
from agentbench.traces.readers import native
from tests.faults.harness import sigint_default
from tests.helpers import served

pytestmark = pytest.mark.timeout(60)

MESSAGES = [{"role": "user", "content": "Say four words."}]
EVENT = ('data: {"choices":[{"delta":{"content":"' + "lorem ipsum " * 83 + '"}}]}\n\n'
         ).encode()
BLOCK = EVENT * (65536 // len(EVENT))
BIG_MB = 100


class Upstream:
    """Answers chat calls: usage as the request's model asks (``huge``: 2**70 prompt
    tokens), ``big``: a stream of BIG_MB MB of content events, then usage."""

    def __init__(self) -> None:
        self.auth: list[str | None] = []
        self.slow_started = asyncio.Event()
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self.chat)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.auth.append(request.headers.get("Authorization"))
        body = await request.json()
        if body.get("model") == "slow":  # an event every 0.1 s, for a minute
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            self.slow_started.set()
            with contextlib.suppress(ConnectionError):  # the proxy cut it
                for _ in range(600):
                    await resp.write(EVENT)
                    await asyncio.sleep(0.1)
            return resp
        if body.get("model") == "held":  # no answer, not even its headers, until released
            self.held.set()
            await self.release.wait()
        if body.get("model") == "big":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for _ in range(BIG_MB * (1 << 20) // len(BLOCK)):
                await resp.write(BLOCK)
            await resp.write(b'data: {"choices":[],"usage":{"prompt_tokens":7,'
                             b'"completion_tokens":1234567}}\n\ndata: [DONE]\n\n')
            return resp
        prompt = 2 ** 70 if body.get("model") == "huge" else 7
        return web.json_response({"choices": [{"message": {"content": "one two"}}],
                                  "usage": {"prompt_tokens": prompt, "completion_tokens": 2}})


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    up = Upstream()
    async with served(up.app) as url:
        yield up, url


async def _chat(url: str, model: str, headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as http, http.post(
            url + "/v1/chat/completions", headers=headers,
            json={"model": model, "messages": MESSAGES, "stream": model == "big"}) as r:
        async for _ in r.content.iter_any():
            pass
        return r.status


async def test_usage_no_request_can_have_loses_that_usage_not_the_recording(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    _, url = upstream
    out = tmp_path / "rec.parquet"
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
    try:
        for model in ("ok", "huge", "ok"):
            assert await _chat(proxy.url, model) == 200
    finally:
        await proxy.close()
    turns = [t for s in native.read(out).sessions for t in s.turns]
    assert len(turns) == 3 and all(t.input_tokens < 100 for t in turns)
    assert read_meta(out)["calls"] == 3
    lines = journal_path(out).read_text().splitlines()
    assert "over 10,000,000 tokens" in json.loads(lines[2])["error"]
    # a journal an older recorder wrote, with that usage taken as it came, and a broken
    # line: --rebuild leaves out that call and that line and writes the others
    bad = json.loads(lines[2]) | {"input_tokens": 2 ** 70, "error": None}
    lines[2] = json.dumps(bad)
    lines.insert(3, '{"index": "not a call"}')
    journal_path(out).write_text("\n".join(lines) + "\n")
    rebuild(out)
    assert sum(len(s.turns) for s in native.read(out).sessions) == 2
    assert read_meta(out)["calls_left_out"] == {"http_error": 0, "invalid": 1,
                                                "unreadable": 1}


async def test_a_link_planted_at_the_temp_file_is_not_followed(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    _, url = upstream
    out = tmp_path / "rec.parquet"
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    for name in (f".{out.name}.{os.getpid()}.tmp", f".{out.name}.tmp", f"{out.name}.tmp"):
        (tmp_path / name).symlink_to(victim)
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
    try:
        assert await _chat(proxy.url, "ok") == 200
    finally:
        await proxy.close()
    assert victim.read_bytes() == b"keep me"
    assert not out.is_symlink() and len(native.read(out).sessions) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == sorted(
        [f".{out.name}.{os.getpid()}.tmp", f".{out.name}.tmp"])  # no temp folder left


async def _record_process(upstream_url: str, out: Path
                          ) -> tuple[asyncio.subprocess.Process, str, str]:
    """``agentbench record`` in a process of its own: (process, proxy URL, banner)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentbench.cli", "record", "--upstream", upstream_url,
        "--listen", "127.0.0.1:0", "-o", str(out), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=sigint_default)  # Ctrl-C reaches it, whatever started the tests
    assert proc.stdout is not None
    banner = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    assert "point the agent at" in banner, banner
    return proc, banner.split("point the agent at ")[1].split("/v1")[0], banner


async def _stop(proc: asyncio.subprocess.Process) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr
    return stdout.decode(), stderr.decode()


def _kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


async def test_upstream_user_info_is_not_printed_nor_a_500(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    up, url = upstream
    out = tmp_path / "rec.parquet"
    proc, proxy_url, banner = await _record_process(
        url.replace("http://", "http://alice:pw-SECRET-77@"), out)
    try:
        # the client's own Authorization (every OpenAI SDK sends one) and none at all
        assert await _chat(proxy_url, "ok", {"Authorization": "Bearer client-key"}) == 200
        assert await _chat(proxy_url, "ok") == 200
    finally:
        stdout, stderr = await _stop(proc)
    assert "pw-SECRET-77" not in banner and "alice" not in banner, banner
    basic = "Basic " + base64.b64encode(b"alice:pw-SECRET-77").decode()
    assert up.auth == [basic, basic]
    assert "Traceback" not in stderr and "pw-SECRET-77" not in stdout + stderr
    for f in (out, journal_path(out)):
        assert b"pw-SECRET-77" not in f.read_bytes()
    assert sum(len(s.turns) for s in native.read(out).sessions) == 2


async def test_a_long_response_is_relayed_with_bounded_memory(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    _, url = upstream
    out = tmp_path / "rec.parquet"
    proc, proxy_url, _ = await _record_process(url, out)
    try:
        assert await _chat(proxy_url, "ok") == 200  # warm: every import done, and
        await asyncio.sleep(1.5)  # the trace written once
        before = _kb(proc.pid, "VmRSS")
        assert await _chat(proxy_url, "big") == 200
        await asyncio.sleep(0.5)  # the call's analysis, after the relay
        peak = _kb(proc.pid, "VmHWM")
    finally:
        await _stop(proc)
    grew_mb = (peak - before) / 1024
    print(f"proxy RSS {before / 1024:.0f} MB before, peak {peak / 1024:.0f} MB relaying "
          f"{BIG_MB} MB: +{grew_mb:.0f} MB")
    assert grew_mb < 50, grew_mb
    turns = [t for s in native.read(out).sessions for t in s.turns]
    assert sorted(t.output_tokens for t in turns) == [2, 1234567]


async def test_two_ctrl_c_with_a_stream_in_flight_still_write_the_trace(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    """A person stops ``record`` with Ctrl-C twice while an agent's stream is in flight:
    the first waits for the stream, the second ends it (its call journaled as a relay
    that stopped), and the trace is written whole. asyncio's second-Ctrl-C
    KeyboardInterrupt had stopped the writing wherever it was: the call in flight lost,
    an unclosed client session, or no trace at all."""
    await _two_signals_with_a_stream_in_flight(upstream, tmp_path, signal.SIGINT)


async def test_two_sigterms_with_a_stream_in_flight_still_write_the_trace(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    """The same with SIGTERM (a service manager, ``kill``): the second SIGTERM was
    ignored, so ``record`` waited on a stream that never ended, without a word, until a
    SIGKILL took the call in flight and the last write."""
    await _two_signals_with_a_stream_in_flight(upstream, tmp_path, signal.SIGTERM)


async def _two_signals_with_a_stream_in_flight(upstream: tuple[Upstream, str],
                                               tmp_path: Path, sig: signal.Signals) -> None:
    up, url = upstream
    out = tmp_path / "rec.parquet"
    proc, proxy_url, _ = await _record_process(url, out)
    slow = None
    try:
        assert await _chat(proxy_url, "ok") == 200
        slow = asyncio.ensure_future(_chat(proxy_url, "slow"))
        await asyncio.wait_for(up.slow_started.wait(), 20)
        await asyncio.sleep(0.3)  # a few events relayed
        proc.send_signal(sig)
        await asyncio.sleep(0.3)  # the first is waiting for the stream
        proc.send_signal(sig)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if slow is not None:
            await asyncio.gather(slow, return_exceptions=True)  # its answer broke off
    err = stderr.decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Unclosed" not in err, err
    assert "wrote" in stdout.decode(), stdout
    assert read_meta(out)["calls"] == 2  # the finished call and the one cut
    calls = {c["model"]: c for c in map(json.loads,
                                        journal_path(out).read_text().splitlines()[1:])}
    assert calls["ok"].get("error") is None
    assert calls["slow"]["error"].startswith("relay stopped")
    assert sum(len(s.turns) for s in native.read(out).sessions) == 2


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_second_signal_ends_a_call_still_waiting_for_its_answer(
        upstream: tuple[Upstream, str], tmp_path: Path, sig: signal.Signals) -> None:
    """A call the upstream has not begun to answer (no headers yet: a non-streamed call on
    a busy server) when ``record`` is stopped: the first signal says that it waits for the
    call, the second ends it (its client gets a 502 in one line) and the trace is written.
    The second signal ended only answers already relayed, so ``record`` sat silent for
    two minutes (aiohttp's shutdown timeout, twice), whatever was pressed."""
    up, url = upstream
    out = tmp_path / "rec.parquet"
    proc, proxy_url, _ = await _record_process(url, out)
    assert proc.stderr is not None
    held = None
    try:
        assert await _chat(proxy_url, "ok") == 200
        held = asyncio.ensure_future(_chat(proxy_url, "held"))
        await asyncio.wait_for(up.held.wait(), 20)
        proc.send_signal(sig)
        note = (await asyncio.wait_for(proc.stderr.readline(), 10)).decode()
        assert "waiting for 1 call in flight" in note and "again" in note, note
        proc.send_signal(sig)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 20)
        assert await asyncio.wait_for(held, 10) == 502
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if held is not None:
            await asyncio.gather(held, return_exceptions=True)
        up.release.set()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr.decode() and "wrote" in stdout.decode(), stdout
    assert read_meta(out)["calls"] == 1  # the call answered; the other had no answer
    assert sum(len(s.turns) for s in native.read(out).sessions) == 1


async def test_an_absolute_form_target_goes_to_the_upstream_like_its_path(
        upstream: tuple[Upstream, str], tmp_path: Path) -> None:
    """``POST http://elsewhere/v1/chat/completions`` (what a client configured to use a
    forward proxy sends): relayed to the one upstream and recorded (it was a 500 with a
    traceback, then a 502)."""
    import json as _json

    _, url = upstream
    out = tmp_path / "rec.parquet"
    proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
    try:
        host, port = proxy.url.removeprefix("http://").split(":")
        body = _json.dumps({"model": "ok", "messages": MESSAGES}).encode()
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST http://elsewhere.example/v1/chat/completions HTTP/1.1\r\n"
                     b"Host: elsewhere.example\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        status = (await reader.readline()).split()[1]
        await reader.read()
        writer.close()
    finally:
        await proxy.close()
    assert status == b"200"
    assert sum(len(s.turns) for s in native.read(out).sessions) == 1


@pytest.mark.parametrize("where", ["", ".", "folder"])
def test_record_to_no_file_name_is_one_line(where: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    (tmp_path / "folder").mkdir()
    target = str(tmp_path / where) if where == "folder" else where
    res = CliRunner().invoke(app, ["record", "--upstream", "http://127.0.0.1:9", "-o", target])
    lines = res.output.strip().splitlines()
    # '' is refused as an empty path before the command runs ('' would be Path('.'))
    want = "'--output': empty: give a path" if where == "" else "give a file name"
    assert res.exit_code == 2 and len(lines) == 1 and want in lines[0], res.output


@pytest.mark.parametrize("junk", [b"\x00\xff" * 4000 + b"\n" * 30, b"root:x:0:0\nbin:x:1:1\n"],
                         ids=["binary", "text"])
def test_rebuild_from_a_file_that_is_no_journal_is_one_line_and_keeps_the_trace(
        junk: bytes, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    out = tmp_path / "r.parquet"
    out.write_bytes(b"a trace recorded earlier")
    journal_path(out).write_bytes(junk)  # not what record writes: no recording header
    res = CliRunner().invoke(app, ["record", "--rebuild", "-o", str(out)])
    lines = res.output.strip().splitlines()  # a line per line, then an empty trace at -o
    assert res.exit_code == 2 and len(lines) == 1 and "not a recording journal" in lines[0]
    assert out.read_bytes() == b"a trace recorded earlier"


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_rebuild_from_a_journal_that_is_no_regular_file_is_one_line(
        kind: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    out = tmp_path / "r.parquet"
    j = journal_path(out)
    if kind == "fifo":  # nothing writes to it: the read waited forever
        os.mkfifo(j)
    elif kind == "folder":  # an OSError line, exit 1
        j.mkdir()
    else:  # /dev/zero: read until memory ran out
        j.symlink_to("/dev/zero")
    res = CliRunner().invoke(app, ["record", "--rebuild", "-o", str(out)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "not a regular file" in lines[0], \
        res.output
    assert not out.exists()


async def test_a_disk_that_fills_mid_recording_is_said_once_and_calls_still_relay(
        upstream: tuple[Upstream, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A full disk under a recording printed a traceback per call ("Task exception was
    never retrieved", the journal's write) and at the end two lines, one with "--debug
    shows where". Now: one line when the journal stops, the calls still relayed, and at
    the end one error line saying what the journal holds and how to rebuild."""
    from agentbench.errors import ResultsWriteError
    from tests.faults.test_faults_disk import tmpfs

    _, url = upstream
    with tmpfs(tmp_path / "disk", "64k") as disk:
        out = disk / "rec.parquet"
        proxy = await start_proxy(RecordConfig(upstream=url, out=out, port=0))
        try:
            assert await _chat(proxy.url, "ok") == 200
            await proxy.recorder.settle()
            st = os.statvfs(disk)
            (disk / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize))
            for _ in range(40):  # past the page the journal's last line ends in
                assert await _chat(proxy.url, "ok") == 200  # relayed all the same
        finally:
            with pytest.raises(ResultsWriteError) as got:
                await proxy.close()
        err = capsys.readouterr().err
        assert "Traceback" not in err and "never retrieved" not in err, err
        assert err.count("cannot write the journal") == 1, err
        kept = proxy.recorder.journal.calls
        assert 1 <= kept < 41 and f"past the first {kept}\n" in err, err
        assert got.value.one_line() == (
            f"{out}: cannot write results (No space left on device); its journal "
            f"{journal_path(out)} holds {kept} of the 41 calls: free space, then "
            f"`agentbench record -o {out} --rebuild`")
        (disk / "filler").unlink()
        rebuild(out)  # the torn last line left out
        assert sum(len(s.turns) for s in native.read(out).sessions) == kept


async def test_a_handler_cancelled_while_its_upstream_is_silent_cancels_the_request(
        tmp_path: Path) -> None:
    """A relay whose handler is cancelled (aiohttp's shutdown, past its timeout) while the
    upstream has not answered takes its upstream request with it (the request is a task
    of its own, for ``cut``; cancelling the handler cancels the task it awaits), not left
    running with a connection no one reads."""
    from aiohttp.test_utils import make_mocked_request

    gate = asyncio.Event()

    async def silent(request: web.Request) -> web.Response:
        await gate.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", silent)
    async with served(app) as url:
        proxy = await start_proxy(RecordConfig(upstream=url, out=tmp_path / "r.parquet",
                                               port=0))
        try:
            req = make_mocked_request("POST", "/v1/chat/completions",
                                      headers={"Content-Type": "application/json"})
            req.read = lambda: asyncio.sleep(0, b"{}")  # type: ignore[method-assign]
            handler = asyncio.ensure_future(proxy.proxy.handle(req))
            for _ in range(200):
                if proxy.proxy.waiting:
                    break
                await asyncio.sleep(0.01)
            (asking,) = proxy.proxy.waiting
            handler.cancel()
            with pytest.raises(asyncio.CancelledError):
                await handler
            await asyncio.sleep(0)
            assert asking.cancelled() and not proxy.proxy.waiting
        finally:
            gate.set()
            await proxy.close()
