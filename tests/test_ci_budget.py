"""The integration stage's CI time (tests/integration/budget.py and conftest.py): a step
that does not fit is skipped with what it needs and what is left, a step's duration on
this host raises its next estimate, and under a deadline a test stuck inside an asyncio
callback is ended (pytest-timeout's signal alarm is caught and logged there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.integration import budget


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTBENCH_CACHE", str(tmp_path))
    return tmp_path / "integration-times.json"


def test_without_a_deadline_every_step_runs(cache: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(budget.DEADLINE_ENV, raising=False)
    assert budget.time_left() is None
    assert all(budget.fits(name) for name in budget.STEPS)


def test_a_step_that_does_not_fit_is_skipped_saying_why(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need = budget.STEPS["vllm-cpu"]
    monkeypatch.setenv(budget.DEADLINE_ENV, str(time.time() + budget.MARGIN_S + need - 100))
    assert not budget.fits("vllm-cpu") and budget.fits("llama-cpp")
    ran = []
    with pytest.raises(pytest.skip.Exception) as e, budget.step("vllm-cpu", "vLLM replaying"):
        ran.append(1)
    assert not ran
    assert str(e.value).startswith(f"vLLM replaying: needs about {need:.0f} s, ")
    left = int(str(e.value).split(", ")[1].split(" s ")[0])
    assert need - 110 <= left <= need - 100
    assert not cache.exists()


def test_a_step_keeps_its_duration_and_a_slower_one_raises_the_estimate(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(budget.DEADLINE_ENV, raising=False)
    with budget.step("llama-cpp", "llama.cpp"):
        pass
    kept = json.loads(cache.read_text())
    assert set(kept) == {"llama-cpp"} and 0 <= kept["llama-cpp"] < 5
    assert budget.expected("llama-cpp") == budget.STEPS["llama-cpp"]  # the floor
    cache.write_text(json.dumps({**kept, "llama-cpp": 5_000}))
    assert budget.expected("llama-cpp") == 5_000
    monkeypatch.setenv(budget.DEADLINE_ENV, str(time.time() + budget.MARGIN_S + 4_999))
    assert not budget.fits("llama-cpp")
    # a step that raised keeps no duration; a broken file is no estimate
    with pytest.raises(RuntimeError), budget.step("llama-agentx", "AgentX"):
        raise RuntimeError("engine failed")
    assert "llama-agentx" not in json.loads(cache.read_text())
    cache.write_bytes(b"\x00\xff not json")
    assert budget.expected("llama-cpp") == budget.STEPS["llama-cpp"]


def test_a_test_stuck_in_an_asyncio_callback_ends_at_the_deadline(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.integration.conftest import pytest_runtest_protocol  # noqa: F401
    """))
    # the callback sleeps in short steps: the signal method's exception is raised inside
    # it and logged by asyncio, and the test goes on (with timeout(2) and no deadline, a
    # 15 s version of this test passed after 17 s, 2026-12-06)
    (tmp_path / "test_stuck.py").write_text(textwrap.dedent("""
        import asyncio, time
        import pytest

        @pytest.mark.timeout(600)
        def test_stuck():
            async def main():
                loop = asyncio.get_running_loop()
                end = time.monotonic() + 60
                def callback():
                    while time.monotonic() < end:
                        time.sleep(0.05)
                loop.call_soon(callback)
                await asyncio.sleep(61)
            asyncio.run(main())
    """))
    deadline = time.time() + 63  # the hook keeps 60 s: this test gets about 3 s
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         str(tmp_path / "test_stuck.py")], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, env={**_env(), budget.DEADLINE_ENV: str(deadline)})
    took = time.monotonic() - t0
    assert out.returncode != 0, out.stdout
    assert "Timeout" in out.stdout + out.stderr
    assert took < 30, (took, out.stdout[-2000:])


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != budget.DEADLINE_ENV}
