"""``sim fit``'s ``--out``, name and runs, checked before any fit or profiling: a device or
FIFO is never replaced (``-o /dev/null --force`` made /dev/null a regular file), a name
``sim check --preset`` could not read back is refused, and a run given twice is refused
(it counted twice)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentbench.cli import app


def _fit(*args: str) -> str:
    r = CliRunner().invoke(app, ["sim", "fit", *args, "--kv-capacity-tokens", "1000"])
    assert r.exit_code == 2, r.output
    line, = r.output.strip().splitlines()
    return line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_link_named_by_out_is_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    kept = tmp_path / "kept.yaml"
    kept.write_text("mine")
    link = tmp_path / "l.yaml"
    link.symlink_to(kept)
    for out in (fifo, link):
        assert "not a regular file" in _fit(str(tmp_path), "-o", str(out), "--force")
    assert fifo.is_fifo() and link.is_symlink() and kept.read_text() == "mine"


@pytest.mark.parametrize(("out", "says"), [
    ("noext", "ends in .yaml or .yml"), ("p.json", "ends in .yaml or .yml"),
    ("my preset.yaml", "not a preset name"), ("-x.yaml", "not a preset name"),
    ("a" * 150 + ".yaml", "not a preset name"),
])
def test_a_preset_name_that_cannot_be_read_back_is_refused_first(tmp_path: Path, out: str,
                                                                 says: str) -> None:
    assert says in _fit(str(tmp_path), "-o", str(tmp_path / out))
    assert list(tmp_path.iterdir()) == []


def test_a_too_long_path_and_a_bad_name_option_are_one_line(tmp_path: Path) -> None:
    assert "cannot write there (File name too long)" in _fit(
        str(tmp_path), "-o", str(tmp_path / ("a" * 300) / "p.yaml"))
    assert "field '--name': not a preset name" in _fit(
        str(tmp_path), "-o", str(tmp_path / "p.yaml"), "--name", "bad name")


def test_a_run_given_twice_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    line = _fit(str(run), f"{run}/", "-o", str(tmp_path / "p.yaml"))
    assert "given twice" in line and "each run counts once" in line


def test_an_unreachable_endpoint_leaves_no_grid_behind(tmp_path: Path) -> None:
    """``--endpoint`` that cannot be reached left ``<out>-grid/grid-probe.parquet``."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = CliRunner().invoke(app, ["sim", "fit", "--endpoint", f"http://127.0.0.1:{port}",
                                 "--kv-capacity-tokens", "1000",
                                 "-o", str(tmp_path / "new" / "p.yaml")])
    assert r.exit_code == 2 and "cannot reach" in r.output, r.output
    assert list(tmp_path.iterdir()) == []  # neither new/ nor new/p-grid/ is left


def test_an_unreachable_endpoint_keeps_an_earlier_grids_probe(tmp_path: Path) -> None:
    """Only what the call made is removed (an earlier grid's probe trace was deleted)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    grid = tmp_path / "g"
    grid.mkdir()
    (grid / "grid-probe.parquet").write_text("keep")
    r = CliRunner().invoke(app, ["sim", "fit", "--endpoint", f"http://127.0.0.1:{port}",
                                 "--kv-capacity-tokens", "1000", "--grid-out", str(grid),
                                 "-o", str(tmp_path / "p.yaml")])
    assert r.exit_code == 2 and "cannot reach" in r.output, r.output
    assert (grid / "grid-probe.parquet").exists()


def test_the_fit_again_it_suggests_pastes_as_one_word_per_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit of ``--endpoint``'s grid that is refused keeps the grid's runs and says how to
    fit them again: with the grid and --out in folders with a space, each is one shell word
    (both were printed bare, so the pasted command named folders that do not exist)."""
    import glob
    import shlex

    from agentbench.errors import InputError
    from agentbench.experiment import simfit, simgrid

    where = tmp_path / "my grid"
    (where / "grid-1").mkdir(parents=True)
    out = tmp_path / "my presets" / "engine.yaml"
    out.parent.mkdir()
    monkeypatch.setattr(simgrid, "run_grid", lambda *a, **k: [where / "grid-1"])

    def refused(dirs: list[str]) -> None:
        raise InputError("too few requests to fit")

    monkeypatch.setattr(simfit, "fit_runs", refused)
    r = CliRunner().invoke(app, ["sim", "fit", "--endpoint", "http://127.0.0.1:9",
                                 "--grid-out", str(where), "-o", str(out)])
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]  # after 'profiling ...: grid runs in ...'
    assert line.startswith("error: too few requests to fit (the grid's runs are kept")
    pasted = shlex.split(line.split("`")[1])
    assert pasted[:3] == ["agentbench", "sim", "fit"] and pasted[4:] == ["-o", str(out)]
    assert glob.glob(pasted[3]) == [f"{where}/grid-1/"]


def test_a_grid_folder_that_cannot_be_made_is_one_line_before_any_request(
        tmp_path: Path) -> None:
    """``--grid-out /proc/x`` (a folder that takes no new folder) or a path through a file:
    it was the OSError's line, ``/proc/x: No such file or directory (--debug shows
    where)``, exit 1."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for grid in ("/proc/x", str(afile / "g")):
        r = CliRunner().invoke(app, ["sim", "fit", "--endpoint", "http://127.0.0.1:9",
                                     "--kv-capacity-tokens", "1000", "--grid-out", grid,
                                     "-o", str(tmp_path / "p.yaml")])
        assert r.exit_code == 2, r.output
        line, = r.output.strip().splitlines()  # not even "profiling ...": nothing began
        assert "field '--grid-out': cannot make the grid's folder" in line, r.output
    assert afile.read_text() == "mine" and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(("args", "says"), [
    (["--endpoint", "notaurl"], "field '--endpoint': "),
    (["--endpoint", "ftp://x"], "field '--endpoint': "),
    (["--endpoint", "http://127.0.0.1:9", "--served-model", "a\nb"],
     "field '--served-model': "),
])
def test_a_bad_endpoint_or_model_is_one_line_naming_its_option(
        tmp_path: Path, args: list[str], says: str) -> None:
    """It was "profiling notaurl: grid runs in ..." and then a line naming
    ``endpoints.0.url`` of a scenario the user never wrote."""
    r = CliRunner().invoke(app, ["sim", "fit", *args, "--kv-capacity-tokens", "1000",
                                 "-o", str(tmp_path / "p.yaml")])
    line, = r.output.strip().splitlines()
    assert r.exit_code == 2 and says in line, r.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--max-num-seqs", "--max-num-batched-tokens",
                                  "--kv-capacity-tokens"])
def test_a_count_no_preset_file_holds_is_refused_before_the_fit(tmp_path: Path,
                                                                 flag: str) -> None:
    """2**70 was taken, the runs fitted, and then the preset made was refused naming a
    line of a file that was never written."""
    r = CliRunner().invoke(app, ["sim", "fit", str(tmp_path), "-o", str(tmp_path / "p.yaml"),
                                 flag, str(2**70)])
    assert r.exit_code == 2 and flag in r.output and "no run.json" not in r.output, r.output
    assert list(tmp_path.iterdir()) == []
