"""`agentbench traces fetch`: corpora downloaded from a local mirror (a tiny fake corpus on
a loopback HTTP server or in a folder; never the network), checked by SHA-256, cached under
AGENTBENCH_CACHE and read as cache:NAME; offline, one line saying what to put where."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import re
import shutil
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.traces import fetch as F
from agentbench.traces.readers import read_trace

MOONCAKE_LINES = (
    b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
    b'{"timestamp": 10, "input_length": 700, "output_length": 6, "hash_ids": [1, 3]}\n')
WEKA_DOC = {"id": "w1", "block_size": 64, "requests": [
    {"t": 0.0, "in": 100, "out": 5, "hash_ids": [1, 2]},
    {"t": 2.0, "in": 150, "out": 5, "hash_ids": [1, 2, 3]}]}


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture()
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server over a folder, and AGENTBENCH_CACHE in the test's folder."""
    root = tmp_path / "mirror"
    root.mkdir()
    monkeypatch.setenv("AGENTBENCH_CACHE", str(tmp_path / "cache"))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):  # type: ignore[no-untyped-def]
            super().__init__(*a, directory=str(root), **k)

        def log_message(self, *a) -> None:  # type: ignore[no-untyped-def]
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def _corpora(base: str, *, pinned: str | None) -> dict[str, F.Corpus]:
    archive = F.CorpusFile("repo-main.tar.gz", f"{base}/up/repo-main.tar.gz", None,
                           {"member": "repo-main/traces", "to": "traces", "suffix": ".json"})
    return {
        "tiny-mooncake": F.Corpus("tiny-mooncake", "two requests", "https://example.org/m",
                                  "Apache-2.0", "mooncake", ".",
                                  [F.CorpusFile("a.jsonl", f"{base}/up/a.jsonl", pinned)]),
        "tiny-weka": F.Corpus("tiny-weka", "one trace", "https://example.org/w", "Apache-2.0",
                              "weka", "traces", [archive]),
    }


def test_fetch_checks_the_hash_and_reads_as_cache_name(mirror: tuple[str, Path]) -> None:
    base, root = mirror
    (root / "up").mkdir()
    (root / "up" / "a.jsonl").write_bytes(MOONCAKE_LINES)
    corpora = _corpora(base, pinned=_sha(MOONCAKE_LINES))
    logs: list[str] = []
    out = F.fetch("tiny-mooncake", corpora=corpora, log=logs.append)
    assert out == F.cache_root() / "traces" / "tiny-mooncake"
    assert str(F.cache_root()).startswith(str(root.parent / "cache"))
    m = F.manifest("tiny-mooncake")
    assert m is not None and m["files"] == [{"name": "a.jsonl", "url": f"{base}/up/a.jsonl",
                                             "sha256": _sha(MOONCAKE_LINES), "pinned": True}]
    path, fmt = F.resolve_cache("tiny-mooncake", corpora)
    assert fmt == "mooncake"
    assert read_trace(str(path), format=fmt).n_requests() == 2
    # a second fetch checks the file in place, downloads nothing
    (root / "up" / "a.jsonl").unlink()
    F.fetch("tiny-mooncake", corpora=corpora, log=logs.append)
    assert logs[-1].endswith("already here")


def test_a_wrong_hash_is_refused_and_the_file_set_aside(mirror: tuple[str, Path]) -> None:
    base, root = mirror
    (root / "up").mkdir()
    (root / "up" / "a.jsonl").write_bytes(MOONCAKE_LINES)
    with pytest.raises(InputError, match="SHA-256 of .* expected 0{64} \\(registry\\)"):
        F.fetch("tiny-mooncake", corpora=_corpora(base, pinned="0" * 64))
    files = F.corpus_dir("tiny-mooncake") / "files"
    assert (files / "a.jsonl.bad").exists() and not (files / "a.jsonl").exists()
    assert F.manifest("tiny-mooncake") is None  # not usable


def test_trust_on_first_use_records_the_hash_and_holds_it(mirror: tuple[str, Path]) -> None:
    base, root = mirror
    (root / "up").mkdir()
    (root / "up" / "repo-main.tar.gz").write_bytes(_tar({
        "repo-main/traces/w1.json": json.dumps(WEKA_DOC).encode(),
        "repo-main/traces/notes.txt": b"not a trace",
        "repo-main/README.md": b"x"}))
    corpora = _corpora(base, pinned=None)
    F.fetch("tiny-weka", corpora=corpora)
    m = F.manifest("tiny-weka")
    assert m is not None and m["files"][0]["pinned"] is False
    assert m["files"][0]["sha256"] == _sha((root / "up" / "repo-main.tar.gz").read_bytes())
    path, fmt = F.resolve_cache("tiny-weka", corpora)
    assert sorted(p.name for p in path.iterdir()) == ["w1.json"]
    assert read_trace(str(path), format=fmt).n_requests() == 2
    # upstream changes: a new download must match what was trusted first
    (F.corpus_dir("tiny-weka") / "files" / "repo-main.tar.gz").unlink()
    (root / "up" / "repo-main.tar.gz").write_bytes(_tar({"repo-main/traces/w2.json": b"{}"}))
    with pytest.raises(InputError, match="\\(first download\\)"):
        F.fetch("tiny-weka", corpora=corpora)


def test_an_archive_member_leaving_its_folder_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tar({"repo-main/traces/../../evil.json": b"{}"}))
    with pytest.raises(InputError, match="leaves its folder"):
        F._extract(archive, {"member": "repo-main/traces", "to": "traces", "suffix": ".json"},
                   tmp_path / "files")
    assert not (tmp_path / "evil.json").exists()


def test_offline_one_line_then_a_file_put_there_by_hand(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBENCH_CACHE", str(tmp_path / "cache"))
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    corpora = _corpora(dead, pinned=_sha(MOONCAKE_LINES))
    with pytest.raises(InputError) as e:
        F.fetch("tiny-mooncake", corpora=corpora, timeout=5)
    line = e.value.one_line()
    dest = F.corpus_dir("tiny-mooncake") / "files" / "a.jsonl"
    assert "\n" not in line
    assert f"download {dead}/up/a.jsonl -> {dest}" in line
    assert "agentbench traces fetch tiny-mooncake" in line
    with pytest.raises(InputError, match="not fetched yet: run `agentbench traces fetch"):
        F.resolve_cache("tiny-mooncake", corpora)
    dest.write_bytes(MOONCAKE_LINES)  # what the line says to do
    F.fetch("tiny-mooncake", corpora=corpora, timeout=5)
    assert F.resolve_cache("tiny-mooncake", corpora)[1] == "mooncake"


def test_registry_entries_are_complete() -> None:
    corpora = F.registry()
    assert {"kv-cache-tester-weka", "agentx-weka", "mooncake-fast25", "tracelab"} <= set(corpora)
    for c in corpora.values():
        assert c.licence.startswith(("Apache-2.0", "CC BY 4.0")) and c.homepage.startswith("https://")
        for f in c.files:
            assert f.url.startswith("https://")
            assert f.sha256 is None or re.fullmatch("[0-9a-f]{64}", f.sha256)


def test_cli_fetches_the_real_mooncake_entry_from_a_folder_mirror(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mooncake_dir: Path) -> None:
    """The registry's pinned Mooncake hashes match the originals beside the repository;
    the tool-agent file, not pinned, is trusted on first use."""
    monkeypatch.setenv("AGENTBENCH_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "mirror" / "mooncake-fast25"
    folder.mkdir(parents=True)
    for name in ("conversation_trace.jsonl", "synthetic_trace.jsonl"):
        shutil.copy(mooncake_dir / name, folder / name)
    (folder / "toolagent_trace.jsonl").write_bytes(MOONCAKE_LINES)
    runner = CliRunner()
    r = runner.invoke(app, ["traces", "list"])
    assert r.exit_code == 0 and "cache:mooncake-fast25 [not fetched" in r.output
    r = runner.invoke(app, ["traces", "fetch", "mooncake-fast25", "--mirror",
                            str(tmp_path / "mirror")])
    assert r.exit_code == 0, r.output
    assert "read it as cache:mooncake-fast25" in r.output
    r = runner.invoke(app, ["traces", "stats", "cache:mooncake-fast25/conversation_trace.jsonl"])
    assert r.exit_code == 0 and "12,031" in r.output and "37.4%" in r.output
    r = runner.invoke(app, ["traces", "list", "--json"])
    assert json.loads(r.output)["cache"]["cache:mooncake-fast25"]["fetched"] is True


def test_cli_offline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBENCH_CACHE", str(tmp_path / "cache"))
    r = CliRunner().invoke(app, ["traces", "fetch", "mooncake-fast25", "--mirror",
                                 "http://127.0.0.1:9"])
    assert r.exit_code == 2
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "download http://127.0.0.1:9/mooncake-fast25/" in errors[0]
    r = CliRunner().invoke(app, ["traces", "fetch", "nope"])
    assert r.exit_code == 2 and "unknown corpus 'nope'" in r.output


def test_a_download_past_its_bound_stops_and_keeps_nothing(mirror: tuple[str, Path]) -> None:
    """An endless or runaway mirror: the download stops at the file's bound, no partial
    file stays and the corpus is not usable."""
    base, root = mirror
    (root / "up").mkdir()
    (root / "up" / "a.jsonl").write_bytes(MOONCAKE_LINES * 50)
    corpora = _corpora(base, pinned=None)
    small = F.CorpusFile("a.jsonl", f"{base}/up/a.jsonl", None, max_bytes=1000)
    corpora["tiny-mooncake"] = F.Corpus("tiny-mooncake", "", "", "", "mooncake", ".", [small])
    with pytest.raises(InputError, match="more than 1,000 bytes"):
        F.fetch("tiny-mooncake", corpora=corpora)
    files = F.corpus_dir("tiny-mooncake") / "files"
    assert list(files.iterdir()) == [] and F.manifest("tiny-mooncake") is None


def test_an_archive_bomb_is_refused_and_nothing_extracted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(F, "MAX_EXTRACT_RATIO", 2)  # 2 MiB for a small archive
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tar({"repo-main/traces/ok.json": b"{}",
                              "repo-main/traces/zeros.json": b"\0" * (3 << 20)}))
    assert archive.stat().st_size < 100_000  # compresses about 1000x
    with pytest.raises(InputError, match="extracts to more than 2 times its size"):
        F._extract(archive, {"member": "repo-main/traces", "to": "traces", "suffix": ".json"},
                   tmp_path / "files")
    assert not (tmp_path / "files" / "traces").exists()


@pytest.mark.parametrize("sub", ["../..", "/etc/passwd", "//etc", "link/passwd"])
def test_cache_paths_stay_inside_the_corpus(mirror: tuple[str, Path], sub: str) -> None:
    base, root = mirror
    (root / "up").mkdir()
    (root / "up" / "a.jsonl").write_bytes(MOONCAKE_LINES)
    corpora = _corpora(base, pinned=_sha(MOONCAKE_LINES))
    F.fetch("tiny-mooncake", corpora=corpora)
    (F.corpus_dir("tiny-mooncake") / "files" / "link").symlink_to("/etc")
    with pytest.raises(InputError, match="in the fetched corpus tiny-mooncake"):
        F.resolve_cache(f"tiny-mooncake/{sub}", corpora)
