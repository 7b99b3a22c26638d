"""examples/github-actions/agentbench.yml runs from a fresh clone: its baseline, candidate,
gate and comment steps, taken from the YAML and run as bash scripts in a ``git clone`` of
this checkout (``gh`` stubbed), make an identical baseline and candidate, gate them (exit
0), write the Markdown, and post one PR comment, then edit that same comment on the next
push instead of adding another."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT

WORKFLOW = "examples/github-actions/agentbench.yml"
STEPS = ("baseline", "candidate", "gate", "comment")

#: a stand-in for the GitHub CLI: logs each call; lists one earlier comment (id 777) when
#: $GH_EXISTING names a file that exists
GH_STUB = """#!/bin/sh
echo "$*" >> "$GH_LOG"
case "$*" in
  *--jq*) if [ -f "$GH_EXISTING" ]; then echo 777; fi ;;
  *) touch "$GH_EXISTING" ;;
esac
"""


def workflow_steps(path: Path) -> dict[str, dict[str, Any]]:
    """The workflow's steps that have an id, by id."""
    data = yaml.safe_load(path.read_text())
    (job,) = data["jobs"].values()
    return {s["id"]: s for s in job["steps"] if "id" in s}


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def committed() -> bool:
    out = subprocess.run(["git", "ls-files", "--error-unmatch", WORKFLOW], cwd=ROOT,
                         capture_output=True, text=True)
    return out.returncode == 0


def run_step(step: dict[str, Any], cwd: Path,
             env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = step["run"]
    assert "${{" not in script, "run scripts take GitHub expressions through env:"
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=120)


@pytest.mark.timeout(180)
@pytest.mark.skipif(not committed(), reason=f"{WORKFLOW} is not committed yet: a fresh "
                    "clone would not have it (nor the gate it runs)")
def test_workflow_runs_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "repo"
    _git("clone", "-q", str(ROOT), str(clone), cwd=tmp_path)
    run_in_clone(clone, tmp_path)


def run_in_clone(clone: Path, tmp: Path) -> None:
    """Run the workflow's steps in ``clone`` as the PR's head with its HEAD as the base."""
    steps = workflow_steps(clone / WORKFLOW)
    assert set(STEPS) <= set(steps), f"steps with ids {STEPS} expected"
    (job,) = yaml.safe_load((clone / WORKFLOW).read_text())["jobs"].values()
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(GH_STUB)
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)
    runner_temp = tmp / "runner"
    runner_temp.mkdir()
    out_file = tmp / "github_output"
    env = {**os.environ, **job.get("env", {}),
           "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "GITHUB_WORKSPACE": str(clone), "GITHUB_OUTPUT": str(out_file),
           "RUNNER_TEMP": str(runner_temp), "BASE_SHA": _git("rev-parse", "HEAD", cwd=clone),
           "REPO": "owner/repo", "PR": "12", "GH_TOKEN": "unused",
           "GH_LOG": str(tmp / "gh.log"), "GH_EXISTING": str(tmp / "gh.existing")}
    env.pop("PYTHONPATH", None)
    for sid in ("baseline", "candidate", "gate"):
        res = run_step(steps[sid], clone, env)
        assert res.returncode == 0, f"step {sid}: {res.stdout}\n{res.stderr}"
    assert out_file.read_text().strip() == "code=0"  # identical virtual runs: no regression
    md = (runner_temp / "gate.md").read_text()
    assert md.startswith("### agentbench gate: ✅ no regression")
    assert "compared exactly" in md and "| ttft_p50 |" in md and "❌" not in md
    # the comment: created on the first push, edited in place on the next
    for _ in range(2):
        res = run_step(steps["comment"], clone, env)
        assert res.returncode == 0, res.stderr
    calls = (tmp / "gh.log").read_text().splitlines()
    writes = [c for c in calls if "--jq" not in c]
    assert writes[0].startswith("api -X POST repos/owner/repo/issues/12/comments")
    assert writes[1].startswith("api -X PATCH repos/owner/repo/issues/comments/777")
    assert len(writes) == 2
    body = (runner_temp / "comment.md").read_text()
    assert body.startswith("<!-- agentbench-gate -->\n### agentbench gate")
    shutil.rmtree(runner_temp / "results")
    # a base that cannot replay the scenario (here: a key it does not know) skips the gate
    # with a comment saying why, instead of failing the job or running into its timeout
    bad = clone / "examples" / "github-actions" / "newer.yaml"
    bad.write_text((clone / env["SCENARIO"]).read_text() + "\na_key_the_base_lacks: 1\n")
    out_file.write_text("")
    shutil.rmtree(runner_temp / "base", ignore_errors=True)
    _git("worktree", "prune", cwd=clone)
    res = run_step(steps["baseline"], clone, {**env, "SCENARIO": str(bad.relative_to(clone))})
    assert res.returncode == 0, res.stderr
    assert out_file.read_text().strip() == "skip=1"
    assert (runner_temp / "gate.md").read_text().startswith(
        "### agentbench gate: skipped (no baseline)")
    job_text = (clone / WORKFLOW).read_text()
    # candidate, gate and the final failing step wait on a baseline
    assert job_text.count("if: steps.baseline.outputs.skip != '1'") == 3
