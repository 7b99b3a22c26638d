"""The scenario `server:` block: agentbench starts the engine, waits for health, replays,
stops it by its process group and keeps its log and exit status. The engine here is
agentbench's own simulator run as a separate process (`serve-sim`), so the test is fast
and needs no build; the real engines are in tests/integration."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from agentbench.engines.models import TinyLlama, write_tiny_hf_llama
from agentbench.engines.server import EngineError, expand, resolve_command
from agentbench.scenario.model import Server
from tests.helpers import free_port


def scenario(tmp_path: Path, weka_dir: Path, server: dict) -> Path:  # type: ignore[type-arg]
    port = server.pop("_port")
    doc = {
        "name": "engine-launch",
        "endpoints": [{"kind": "openai", "name": "local", "url": f"http://127.0.0.1:{port}",
                       "model": "sim", "ignore_eos": True}],
        "server": server,
        "trace": {"kind": "file", "source": str(weka_dir), "format": "weka",
                  "filters": {"max_sessions": 1},
                  "transform": {"max_context_tokens": 20000, "scale": 0.1}},
        "load": {"kind": "lanes", "concurrency": 1},
        "timing": {"time_scale": 0.0},
        "limits": {"max_requests": 6, "recycle": False},
        "output": {"dir": str(tmp_path / "results"), "run_id": "r"},
    }
    p = tmp_path / "scenario.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def agentbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentbench.cli", *args],
                          capture_output=True, text=True, timeout=120)


def test_run_starts_waits_and_stops_the_server(tmp_path: Path, weka_dir: Path) -> None:
    port = free_port()
    sc = scenario(tmp_path, weka_dir, {
        "_port": port,
        "command": f"{{python}} -m agentbench.cli serve-sim --port {port} --speedup 1000 "
                   "--model sim --preset ${AB_TEST_PRESET:-h200-llama3-70b}",
        "env": {"AB_TEST_MARK": "x"},
        "health_url": f"http://127.0.0.1:{port}/health",
        "startup_timeout_s": 60, "stop_timeout_s": 10})
    res = agentbench("run", str(sc), "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "server: healthy after" in res.stderr
    run_dir = tmp_path / "results" / "r"
    info = json.loads((run_dir / "server.json").read_text())
    assert info["command"][0] == sys.executable
    assert info["command"][-1] == "h200-llama3-70b"  # ${VAR:-default} expanded
    assert info["env"] == ["AB_TEST_MARK"]  # names only, never values
    assert info["stopped_by"] == "agentbench"
    assert info["exit_status"] is not None and info["startup_s"] > 0
    # the staged log was moved into the run folder, nothing left beside it
    assert (run_dir / "server.log").is_file()
    assert not list((tmp_path / "results").glob(".server-*"))
    reqs = pq.read_table(run_dir / "requests.parquet").to_pandas()
    assert len(reqs) == 6 and (reqs["status"] == "ok").all()
    # the process group is gone
    with pytest.raises(ProcessLookupError):
        os.killpg(info["pid"], 0)
    # and the port is free again (for a server, which binds with SO_REUSEADDR)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_server_that_dies_is_a_one_line_error_with_its_log(tmp_path: Path,
                                                             weka_dir: Path) -> None:
    port = free_port()
    sc = scenario(tmp_path, weka_dir, {
        "_port": port,
        "command": [sys.executable, "-c", "import sys; print('boom: bad flag'); sys.exit(3)"],
        "health_url": f"http://127.0.0.1:{port}/health", "startup_timeout_s": 30})
    res = agentbench("run", str(sc), "--no-progress")
    assert res.returncode == 2
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "exited with status 3" in line[0] and "boom: bad flag" in line[0]


def test_a_server_that_never_gets_healthy_is_stopped(tmp_path: Path, weka_dir: Path) -> None:
    port = free_port()
    sc = scenario(tmp_path, weka_dir, {
        "_port": port,
        "command": [sys.executable, "-c", "import time; time.sleep(600)"],
        "health_url": f"http://127.0.0.1:{port}/health", "startup_timeout_s": 1,
        "stop_timeout_s": 5})
    res = agentbench("run", str(sc), "--no-progress")
    assert res.returncode == 2 and "not healthy after 1 s" in res.stderr


def test_something_already_on_the_port_is_refused(tmp_path: Path, weka_dir: Path) -> None:
    port = free_port()
    other = subprocess.Popen([sys.executable, "-m", "agentbench.cli", "serve-sim", "--port",
                              str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import time

        from agentbench.engines.server import _answers

        deadline = time.monotonic() + 60
        while _answers(f"http://127.0.0.1:{port}/health") != 200:
            assert other.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        sc = scenario(tmp_path, weka_dir, {
            "_port": port, "command": [sys.executable, "-c", "pass"],
            "health_url": f"http://127.0.0.1:{port}/health"})
        res = agentbench("run", str(sc), "--no-progress")
        assert res.returncode == 2 and "already answers" in res.stderr
    finally:
        other.terminate()
        other.wait(30)


def test_expand_and_command_splitting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AB_X", "1")
    monkeypatch.delenv("AB_UNSET", raising=False)
    assert expand("a${AB_X}b${AB_UNSET:-d}") == "a1bd"
    with pytest.raises(EngineError, match="AB_UNSET is not set"):
        expand("${AB_UNSET}")
    cfg = Server(command="{python} -m x --flag 'two words'", health_url="http://h/health")
    assert resolve_command(cfg) == [sys.executable, "-m", "x", "--flag", "two words"]


def test_tiny_hf_model_tokenizer_counts_a_synthetic_word_as_one_token(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    from agentbench.traces.words import block_text

    out = write_tiny_hf_llama(tmp_path / "m", TinyLlama(dim=64, layers=1, heads=1,
                                                         kv_heads=1, ff=128))
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    text = block_text(7, 3, 200)
    assert len(tok.encode(text).ids) == 200
    assert tok.decode(tok.encode(text).ids) == text
    cfg = json.loads((out / "config.json").read_text())
    head = 8 + int.from_bytes((out / "model.safetensors").read_bytes()[:8], "little")
    # BF16: vocab x dim x 2 bytes for the embedding and the head, plus the layer
    n = 2 * cfg["vocab_size"] * 64 + (64 * 64 * 4 + 3 * 64 * 128 + 2 * 64) + 64
    assert (out / "model.safetensors").stat().st_size == head + 2 * n


def test_bf16_bits_round_to_nearest() -> None:
    from agentbench.engines.models import _bf16_bits

    x = np.array([1.0, -2.5, 3.14159, 1e-3], dtype=np.float32)
    back = (_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
    assert back[0] == 1.0 and back[1] == -2.5
    assert np.allclose(back, x, rtol=2 ** -8)


def test_an_api_key_in_the_server_command_never_reaches_the_run_folder(
        tmp_path: Path, weka_dir: Path) -> None:
    port = free_port()
    secret = "sk-test-SECRET-4471"
    # the command carries the key (like `vllm serve --api-key ${KEY}`) and the server
    # prints it into its log
    sc = scenario(tmp_path, weka_dir, {
        "_port": port,
        "command": f"{{python}} -c \"print('key is ${{AB_SECRET_KEY}}', flush=True); "
                   f"from agentbench.cli import main; import sys; "
                   f"sys.argv=['agentbench','serve-sim','--port','{port}','--speedup','1000',"
                   f"'--model','sim']; main()\" ${{AB_SECRET_KEY}}",
        "health_url": f"http://127.0.0.1:{port}/health",
        "startup_timeout_s": 60, "stop_timeout_s": 10})
    doc = yaml.safe_load(sc.read_text())
    doc["endpoints"][0]["api_key_env"] = "AB_SECRET_KEY"
    sc.write_text(yaml.safe_dump(doc))
    res = subprocess.run([sys.executable, "-m", "agentbench.cli", "run", str(sc),
                          "--no-progress"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AB_SECRET_KEY": secret})
    assert res.returncode == 0, res.stderr
    run_dir = tmp_path / "results" / "r"
    assert "<redacted>" in (run_dir / "server.log").read_text()  # the line was there
    assert "<redacted>" in (run_dir / "server.json").read_text()
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f
    assert secret not in res.stdout + res.stderr
