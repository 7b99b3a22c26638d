"""benchmarks/client_bench.py's CPU sampler: a process tree's CPU, read from /proc, never
counts a process that ended twice (once itself, once in its parent's reaped-children
time). Compared with the tree's own rusage, so no figure depends on the machine's speed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, fastserver, port_of

sys.path.insert(0, str(ROOT / "benchmarks"))

# a parent whose child burns CPU, is reaped, and then the parent idles: the child's CPU
# moves into the parent's cutime while a stale reading of the child could still be summed
PARENT = """
import subprocess, sys, time
burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.8: pass"
subprocess.run([sys.executable, "-c", burn], check=True)
time.sleep(1.5)
"""


@pytest.mark.timeout(60)
def test_sampler_counts_an_exited_child_once() -> None:
    client_bench = pytest.importorskip("client_bench")
    proc = subprocess.Popen([sys.executable, "-c", PARENT])
    sampler = client_bench.Sampler(proc.pid, [], period=0.02)
    sampler.start()
    _, status, ru = os.wait4(proc.pid, 0)
    sampler.stop.set()
    sampler.join()
    assert os.waitstatus_to_exitcode(status) == 0
    total = ru.ru_utime + ru.ru_stime  # parent and its reaped child
    most = max(cpu for _, cpu, _ in sampler.samples)
    assert most <= total + 0.1, (most, total)  # the old sampler read ~total + 0.8 here
    assert most >= 0.8 * 0.9  # the child's burn was seen


@pytest.mark.timeout(60)
def test_floor_client_reads_every_event(tmp_path: Path) -> None:
    """The floor client (benchmarks/floor_client.c) finds the end of each chunked answer
    and counts the reads as RequestRecord.reads does: many per answer against a server
    that writes events apart (its Content-Length path is the benchmark's nginx row)."""
    import shutil

    client_bench = pytest.importorskip("client_bench")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    exe = client_bench.floor_exe(tmp_path)
    assert exe is not None
    with fastserver("--tokens", "16", "--per-event", "--step", "0.002") as url:
        out = subprocess.run([str(exe), str(port_of(url)), "4", "20", "100"],
                             capture_output=True, text=True, timeout=30, check=True)
    import json

    got = json.loads(out.stdout)
    assert got["requests"] == 20
    # 16 token events + role, usage and [DONE]: 19 events, plus the last chunk "0"; the
    # server writes one event per stream every 2 ms, so the reads are many (on a busy
    # machine the client finds some events waiting together: fewer, never more)
    assert 3 <= got["reads_per_request"] <= 20, got
