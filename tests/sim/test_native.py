"""The opt-in compiled engine (``agentbench.sim.native``): a build is used only when it was
made by this Python from the sources as they are now, all of its modules or none, and a
compiled engine's runs are the interpreted engine's (virtual time makes that exact)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentbench.sim import native
from tests.helpers import ROOT

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _fake_build(folder: Path, **changes: object) -> Path:
    """A build folder whose manifest names empty files (``plan`` never loads them)."""
    folder.mkdir()
    modules = {m: {"file": f"{m}{SUFFIX}", "sha256": native.digest(native.source_of(m))}
               for m in native.MODULES}
    manifest: dict[str, object] = {"ext_suffix": SUFFIX, "modules": modules,
                                   "shared": {"name": "abc__mypyc", "file": f"abc__mypyc{SUFFIX}"}}
    manifest.update(changes)
    for entry in [*modules.values(), manifest["shared"]]:
        (folder / entry["file"]).write_bytes(b"")  # type: ignore[index]
    (folder / native.MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_a_build_of_these_sources_is_used_whole(tmp_path: Path) -> None:
    got = native.plan(_fake_build(tmp_path / "b"))
    assert isinstance(got, dict)
    assert set(got) == {*native.MODULES, "abc__mypyc"}
    assert got["agentbench.sim.engine"] == tmp_path / "b" / f"agentbench.sim.engine{SUFFIX}"


def test_a_build_that_cannot_be_used_says_why_in_one_line(tmp_path: Path) -> None:
    b = _fake_build(tmp_path / "stale")
    manifest = json.loads((b / native.MANIFEST).read_text())
    manifest["modules"]["agentbench.sim.engine"]["sha256"] = "0" * 64  # engine.py edited
    (b / native.MANIFEST).write_text(json.dumps(manifest))
    assert native.plan(b) == "engine.py changed since it was compiled"
    assert "built for '.cpython-99.so'" in str(native.plan(
        _fake_build(tmp_path / "other", ext_suffix=".cpython-99.so")))
    part = _fake_build(tmp_path / "part")
    manifest = json.loads((part / native.MANIFEST).read_text())
    del manifest["modules"]["agentbench.sim.slots"]
    (part / native.MANIFEST).write_text(json.dumps(manifest))
    assert native.plan(part) == "the build lacks agentbench.sim.slots"
    gone = _fake_build(tmp_path / "gone")
    (gone / f"agentbench.sim.kvcache{SUFFIX}").unlink()
    assert native.plan(gone) == f"missing agentbench.sim.kvcache{SUFFIX}"
    assert native.plan(_fake_build(tmp_path / "json", shared={
        "name": "json", "file": "x.so"})) == "'json' is not a mypyc group's library"
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / native.MANIFEST).write_bytes(b"\x00\xff not json")
    assert str(native.plan(tmp_path / "junk")).startswith("no readable build")
    for why in (native.plan(b), native.plan(tmp_path / "junk"), native.plan(tmp_path / "none")):
        assert isinstance(why, str) and "\n" not in why


def test_an_unusable_build_leaves_the_engine_interpreted(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    # (this suite may run under a build: its finder is set aside here)
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path
                                           if not isinstance(f, native._Finder)])
    before = list(sys.meta_path)
    why = native.install({native.ENV: str(tmp_path / "none")})
    assert why is not None and sys.meta_path == before
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the engine runs from its sources" in err
    assert native.install({}) is None and sys.meta_path == before
    if not os.environ.get(native.ENV):  # (this suite may run under a build: then compiled)
        assert not native.compiled()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler to build the compiled engine with")
def test_the_compiled_engine_gives_the_interpreted_engines_run(tmp_path: Path) -> None:
    """Built from these sources (about a minute), the compiled engine replays a shipped
    what-if to the same tables as the interpreted one."""
    pytest.importorskip("mypyc")
    import pyarrow.parquet as pq

    build = tmp_path / "native"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_native.py"), "--out",
                    str(build)], check=True, capture_output=True)
    runs = {}
    for label, env in (("pure", {}), ("compiled", {native.ENV: str(build)})):
        out = tmp_path / label
        code = ("import sys; from agentbench.sim import native; "
                "print('compiled' if native.compiled() else 'pure'); "
                "from agentbench.cli import app; sys.argv = ['agentbench', 'run', "
                f"{str(ROOT / 'scenarios' / 'shared-kv-what-if.yaml')!r}, '-o', {str(out)!r}, "
                "'--no-progress']; app()")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, **env}, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-2000:]
        assert res.stdout.splitlines()[0] == label and "not used" not in res.stderr
        runs[label] = sorted(out.iterdir())
    assert len(runs["pure"]) == len(runs["compiled"]) == 3
    for a, b in zip(runs["pure"], runs["compiled"], strict=True):
        for table in ("requests.parquet", "sessions.parquet", "server_metrics.parquet"):
            assert pq.read_table(a / table).equals(pq.read_table(b / table)), (a.name, table)
