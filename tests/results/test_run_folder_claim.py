"""Runs started together never share a run folder: each takes its own by an exclusive
claim (``agentbench/results/rundir.py``), where a check of emptiness let runs started in
one second (one default id) or given one ``--run-id`` write into one folder, each
replacing the others' tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agentbench.errors import InputError
from agentbench.results.rundir import CLAIM_FILE, make_run_dir, write_run_json
from tests.helpers import SCENARIOS


def _take(parent: str) -> str:
    return str(make_run_dir(parent, "q", "same-id"))


def test_runs_that_start_together_each_get_their_own_folder(tmp_path: Path) -> None:
    # one after another, before any has written its run.json (the folders still empty)
    first = [make_run_dir(tmp_path / "seq", "q", "same-id") for _ in range(3)]
    assert [p.name for p in first] == ["same-id", "same-id-1", "same-id-2"]
    # at once, from processes racing for one name
    with ProcessPoolExecutor(4) as pool:
        raced = list(pool.map(_take, [str(tmp_path / "race")] * 12))
    assert len(set(raced)) == 12
    # the claim goes once run.json is there; a folder with files is never taken
    write_run_json(first[0], {"run_id": "same-id"}, ())
    assert sorted(p.name for p in first[0].iterdir()) == ["run.json"]
    assert make_run_dir(tmp_path / "seq", "q", "same-id").name == "same-id-3"
    # an empty folder made beforehand is still taken as it is
    (tmp_path / "pre" / "mine").mkdir(parents=True)
    assert make_run_dir(tmp_path / "pre", "q", "mine") == tmp_path / "pre" / "mine"
    assert CLAIM_FILE.startswith(".")


def test_three_runs_started_in_one_second_keep_all_their_rows(tmp_path: Path) -> None:
    """As a user ran them: ``agentbench run`` three times at once, one scenario."""
    cmd = [sys.executable, "-m", "agentbench.cli", "run", str(SCENARIOS / "quickstart.yaml"),
           "-o", str(tmp_path), "--no-progress", "--set", "limits.max_requests=20",
           "--run-id", "together"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    runs = sorted(tmp_path.iterdir())
    assert [r.name for r in runs] == ["together", "together-1", "together-2"]
    for r in runs:
        info = json.loads((r / "run.json").read_text())
        assert info["status"] == "completed" and not (r / CLAIM_FILE).exists()
        assert info["run_id"] == r.name
        assert pq.read_metadata(r / "requests.parquet").num_rows == 20


def test_a_file_where_the_run_folder_would_go_is_taken_like_a_folder_with_files(
        tmp_path: Path) -> None:
    """A file (or a broken link) named like the run id: the run said 'out: field
    'output.dir': cannot write results there (Not a directory)', naming the folder that
    was fine, and ran nothing."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "f").write_text("a file of the user's")
    (out / "gone").symlink_to(tmp_path / "nowhere")
    assert make_run_dir(out, "q", "f") == out / "f-1"
    assert make_run_dir(out, "q", "gone") == out / "gone-1"
    assert (out / "f").read_text() == "a file of the user's"
    assert not (tmp_path / "nowhere").exists()


def test_an_output_dir_that_is_no_folder_says_what_it_is(tmp_path: Path) -> None:
    """A link to nothing and a loop of links were both called "a file", and a file or
    such a link above the folder was blamed on the folder itself."""
    (tmp_path / "f").write_text("x")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    cases = {
        "f": "is a file, not a folder",
        "f/sub": f"{tmp_path / 'f'}: is a file, not a folder",
        "dangling": f"a link to nothing ({tmp_path / 'nowhere'}), not a folder",
        "dangling/sub": f"{tmp_path / 'dangling'}: a link to nothing "
                        f"({tmp_path / 'nowhere'}), not a folder",
        "a": "a loop of symbolic links, not a folder",
    }
    for where, said in cases.items():
        with pytest.raises(InputError) as got:
            make_run_dir(tmp_path / where, "q", None)
        assert got.value.message == said and got.value.field == "output.dir", where
    assert not (tmp_path / "nowhere").exists()
