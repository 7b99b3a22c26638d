"""A synthetic trace's root-session count is bounded by ``MAX_SYNTH_SESSIONS``, the
scenario's ``trace.sessions`` bound, at every entry point: ``synthesize``, ``traces synth
-n``, ``synth:PROFILE:N`` wherever it is read (``run --trace``, ``traces stats``,
``traces convert``). Past it each is one line naming the flag or spec, before anything is
drawn (10**20 was a numpy OverflowError traceback; 2 * 10**7 ran for minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.scenario.flags import trace_spec
from agentbench.scenario.model import SynthSource
from agentbench.traces import MAX_SYNTH_SESSIONS
from agentbench.traces.synth import synthesize

pytestmark = pytest.mark.timeout(60)

OVER = (MAX_SYNTH_SESSIONS + 1, 10**20, 10**5000)
#: the same counts as typed (a 5,000-digit one: past what int() reads from text)
OVER_TYPED = (str(MAX_SYNTH_SESSIONS + 1), "1" + "0" * 20, "9" * 5000)
IDS = ["bound+1", "1e20", "5000-digits"]


def test_the_bound_is_the_scenarios() -> None:
    assert SynthSource(kind="synth", profile="codex", sessions=MAX_SYNTH_SESSIONS)
    with pytest.raises(ValidationError, match="less than or equal to"):
        SynthSource(kind="synth", profile="codex", sessions=MAX_SYNTH_SESSIONS + 1)


@pytest.mark.parametrize("n", OVER, ids=IDS)
def test_synthesize_refuses_counts_past_the_bound(n: int) -> None:
    with pytest.raises(InputError, match=f"field 'sessions': must be between 0 and "
                                         f"{MAX_SYNTH_SESSIONS:,}") as e:
        synthesize("codex", n, 0)
    assert len(str(e.value).splitlines()) == 1 and len(str(e.value)) < 120


def test_synthesize_refuses_a_negative_seed() -> None:
    with pytest.raises(InputError, match="field 'seed'"):
        synthesize("codex", 1, -1)


@pytest.mark.parametrize("n", OVER_TYPED, ids=IDS)
def test_a_synth_spec_past_the_bound_names_where_it_came_from(n: str) -> None:
    with pytest.raises(InputError, match=f"^SOURCE: .*at most {MAX_SYNTH_SESSIONS:,}"):
        trace_spec(f"synth:codex:{n}", where="SOURCE")
    with pytest.raises(InputError, match="^--trace: "):
        trace_spec(f"synth:codex:{n}")
    assert trace_spec(f"synth:codex:{MAX_SYNTH_SESSIONS}")["sessions"] == MAX_SYNTH_SESSIONS
    assert trace_spec("synth:codex:0007")["sessions"] == 7


def _one_line_error(args: list[str]) -> str:
    res = CliRunner().invoke(app, args)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "Traceback" not in res.output
    return lines[0]


@pytest.mark.parametrize("n", [str(MAX_SYNTH_SESSIONS * 2), "9" * 20])
def test_the_commands_refuse_counts_past_the_bound(n: str, tmp_path: Path) -> None:
    out = str(tmp_path / "t.parquet")
    line = _one_line_error(["traces", "synth", "-p", "codex", "-n", n, "-o", out])
    assert "'--sessions'" in line and f"{MAX_SYNTH_SESSIONS:,}" in line
    for cmd in (["traces", "stats", f"synth:codex:{n}"],
                ["traces", "convert", f"synth:codex:{n}", "-o", out]):
        line = _one_line_error(cmd)
        assert line.startswith("error: SOURCE: synth:PROFILE:SESSIONS takes at most"), line
    line = _one_line_error(["run", "--url", "http://127.0.0.1:9", "--model", "m",
                            "--trace", f"synth:codex:{n}"])
    assert line.startswith("error: --trace: "), line
    line = _one_line_error(["traces", "synth", "-p", "codex", "-n", "1", "--seed", "-1",
                            "-o", out])
    assert "'--seed'" in line


CODEX = (Path(__file__).parents[2] / "agentbench/traces/synth/profiles/codex.yaml").read_text()


@pytest.mark.parametrize(("old", "new"), [
    ("  value: 64\n", "  value: 0\n"),                        # block_size: ZeroDivisionError
    ("  value: 64\n", "  value: 1.5\n"),                      # taken as 1
    ("    value: 9473\n", "    value: 1e300\n"),              # numpy ValueError
    ("    value: 9473\n", "    value: .nan\n"),               # NaN to int
    ("{0: 151.0, 10: 501.0", "{0: .nan, 10: 501.0"),          # NaN to int
    ("    min: 1\n", "    min: 100000000\n"),                 # 1.11 PiB of hash ids
    ("    median: 264.1\n    p90: 935.1", "    median: 2e7\n    p90: 3e7"),  # outputs
    ("    value: 9473\n", "    value: -500\n"),               # a negative prefix, taken
], ids=["block-0", "block-1.5", "prefix-1e300", "prefix-nan", "quantile-nan",
        "turns-min-1e8", "output-2e7", "prefix-negative"])
def test_a_profile_whose_numbers_no_trace_can_have_is_one_line(
        old: str, new: str, tmp_path: Path) -> None:
    assert old in CODEX
    assert "p.yaml" in _synth_refused(CODEX.replace(old, new, 1), tmp_path)


def _synth_refused(profile: str, tmp_path: Path) -> str:
    """``traces synth`` of the profile text ``profile``: one error line, exit 2, and no
    trace written (there were tracebacks, or a trace written anyway); the line."""
    prof = tmp_path / "p.yaml"
    prof.write_text(profile)
    out = tmp_path / "t.parquet"
    res = CliRunner().invoke(app, ["traces", "synth", "-p", str(prof), "-n", "3",
                                   "-o", str(out)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), \
        res.output
    assert not out.exists()
    return lines[0]


AGENTX = (Path(__file__).parents[2] / "agentbench/traces/synth/profiles/agentx.yaml").read_text()


@pytest.mark.parametrize(("old", "new"), [
    ("    value: 0.44\n", "    value: null\n"),       # share_of_roots: float(None)
    ("    value: 0.44\n", "    value: many\n"),       # float('many')
    ("    value: 0.44\n", "    value: 2\n"),          # every root, silently
    ("    value: 0.929\n", "    value: []\n"),        # blocking_share: float([])
    ("    value: 223000\n", "    value: null\n"),     # trigger_tokens: in the validator
    ("    value: 256000\n", "    value: .inf\n"),     # window_tokens: int(inf)
], ids=["share-null", "share-word", "share-2", "blocking-list", "trigger-null",
        "window-inf"])
def test_a_profile_scalar_that_is_no_number_in_range_is_one_line(
        old: str, new: str, tmp_path: Path) -> None:
    """The subagent shares and compaction sizes are ``value:`` scalars of any YAML type:
    a string, null or list reached ``float()`` as a traceback."""
    assert old in AGENTX
    line = _synth_refused(AGENTX.replace(old, new, 1), tmp_path)
    assert "p.yaml" in line and "must be a number" in line
