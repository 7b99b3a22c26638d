"""``-o`` of ``traces synth`` and ``traces convert`` is checked as ``record`` checks it:
'' or a folder is one line asking for a file name (it was pyarrow's "Failed to open local
file '.'"), an existing file or link is refused and left as it was (it was overwritten),
and missing folders above it are made, as ``record`` makes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.proxy import RecordConfig, start_proxy
from agentbench.traces.output import check_file_name, check_new
from agentbench.traces.readers import native
from agentbench.traces.synth import synthesize

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native.write(synthesize("codex", 2, 0), tmp_path_factory.mktemp("src") / "s.parquet")


def _commands(source: Path, out: str) -> list[list[str]]:
    return [["traces", "synth", "-p", "codex", "-n", "2", "-o", out],
            ["traces", "convert", str(source), "-o", out],
            ["record", "--upstream", "http://127.0.0.1:9", "-o", out]]


def _one_line_error(args: list[str]) -> str:
    res = CliRunner().invoke(app, args)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, (args, res.output)
    return lines[0]


@pytest.mark.parametrize("where", ["", ".", "folder", "missing/.."])
def test_no_file_name_is_one_line(where: str, source: Path, tmp_path: Path) -> None:
    """``missing/..`` (a folder not there yet, then ``..``) read the trace, made the
    folder and said the output 'came into being while the trace was made'."""
    (tmp_path / "folder").mkdir()
    out = str(tmp_path / where) if where in ("folder", "missing/..") else where
    # '' is refused by the command line as an empty path ('' would read as '.')
    want = "'--output': empty: give a path" if where == "" else "give a file name for the trace"
    for args in _commands(source, out):
        assert want in _one_line_error(args)


@pytest.mark.parametrize("kind", ["file", "link", "dangling link"])
def test_an_existing_output_is_refused_and_kept(kind: str, source: Path,
                                                tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    if kind == "file":
        out.write_bytes(b"keep me")
    else:
        target = tmp_path / ("victim" if kind == "link" else "nowhere")
        if kind == "link":
            target.write_bytes(b"keep me")
        out.symlink_to(target)
    for args in _commands(source, str(out)):
        line = _one_line_error(args)
        assert line.startswith(f"error: {out}: exists; pick another -o or remove it"), line
    if kind == "file":
        assert out.read_bytes() == b"keep me"
    elif kind == "link":
        assert (tmp_path / "victim").read_bytes() == b"keep me"
    else:
        assert not (tmp_path / "nowhere").exists()


def test_convert_refuses_to_write_over_its_source(source: Path) -> None:
    before = source.read_bytes()
    assert "exists" in _one_line_error(["traces", "convert", str(source), "-o", str(source)])
    assert source.read_bytes() == before


def test_missing_folders_are_made(source: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    synth, convert = (tmp_path / d / "sub" / "t.parquet" for d in ("a", "b"))
    res = runner.invoke(app, ["traces", "synth", "-p", "codex", "-n", "2", "-o", str(synth)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["traces", "convert", str(source), "-o", str(convert)])
    assert res.exit_code == 0, res.output
    assert native.read(synth) == native.read(convert) == native.read(source)


async def test_record_makes_missing_folders_too(tmp_path: Path) -> None:
    out = tmp_path / "c" / "sub" / "r.parquet"
    proxy = await start_proxy(RecordConfig(upstream="http://127.0.0.1:9", out=out, port=0))
    await proxy.close()
    assert native.read(out).sessions == []


def test_the_checks(tmp_path: Path) -> None:
    check_file_name(tmp_path / "new.parquet")
    check_new(tmp_path / "new.parquet", tmp_path / "new.parquet.calls.jsonl")
    for bad in (Path(""), Path("."), tmp_path):
        with pytest.raises(InputError, match="field 'output': give a file name"):
            check_file_name(bad)
    (tmp_path / "j").write_text("")
    with pytest.raises(InputError, match=r"j: exists; pick another -o or remove it \(hint\)$"):
        check_new(tmp_path / "new.parquet", tmp_path / "j", hint=" (hint)")


@pytest.mark.parametrize("where", ["a file", "a dangling link", "/proc", "a long name"])
def test_an_output_no_file_can_take_is_one_line_before_the_read(where: str, source: Path,
                                                                tmp_path: Path) -> None:
    """A file or a link where -o's folder goes, a folder that takes no new file (/proc), a
    name over the file system's 255 bytes: one line naming -o, exit 2, for all three
    commands, before the read or the recording. Each was an OSError after the read
    ('f.txt: File exists', pyarrow's 'Failed to open local file'), exit 1."""
    (tmp_path / "f").write_text("keep me")
    (tmp_path / "dl").symlink_to(tmp_path / "nowhere")
    out = {"a file": tmp_path / "f" / "t.parquet", "a dangling link": tmp_path / "dl" / "t.parquet",
           "/proc": Path("/proc/t.parquet"), "a long name": tmp_path / ("a" * 300 + ".parquet")
           }[where]
    for args in _commands(source, str(out)):
        line = _one_line_error(args)
        assert "field 'output'" in line, line
    assert (tmp_path / "f").read_text() == "keep me" and not (tmp_path / "nowhere").exists()


def test_a_trace_cut_short_while_written_leaves_nothing_at_the_output(
        source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or a full disk) while the parquet file is written: nothing at -o, so the
    next try is not refused as 'exists' (half a file was left there), and no temporary
    folder beside it."""
    def cut_short(trace: Any, path: Path) -> None:
        Path(path).write_bytes(b"PAR1 half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(native, "write", cut_short)
    out = tmp_path / "t.parquet"
    for args in _commands(source, str(out))[:2]:
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 130
        assert list(tmp_path.iterdir()) == []


def test_a_file_that_comes_at_the_output_during_the_read_is_not_replaced(
        source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-o is checked before a read that may take minutes; a file (or a link) put there
    meanwhile was overwritten (or written through). It is kept now: one line, exit 2."""
    from agentbench.cli import traces as cli_traces

    out = tmp_path / "t.parquet"
    read = cli_traces._read_transformed

    def read_while_another_writes(*a: Any) -> Any:
        out.symlink_to(tmp_path / "victim")
        return read(*a)

    monkeypatch.setattr(cli_traces, "_read_transformed", read_while_another_writes)
    line = _one_line_error(["traces", "convert", str(source), "-o", str(out)])
    assert "came into being while the trace was made; not replaced" in line
    assert out.is_symlink() and not (tmp_path / "victim").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_a_read_that_fails_leaves_no_folder_behind(tmp_path: Path) -> None:
    """-o's folder is checked before the read, but only made when the file is written."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    out = tmp_path / "new" / "sub" / "t.parquet"
    assert "bad.jsonl" in _one_line_error(["traces", "convert", str(bad), "-o", str(out)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
