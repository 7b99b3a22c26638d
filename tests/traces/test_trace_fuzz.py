"""Bad traces are one line, never a traceback and never silently read: a checked-in corpus
of broken files (tests/fuzz/traces/), folders of good and bad files (``skip_bad``), and
Hypothesis over random bytes, random JSON and damaged records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbench.errors import InputError
from agentbench.traces import MAX_TOKENS
from agentbench.traces.model import Trace
from agentbench.traces.readers import BadTraceFiles, read_trace
from tests.helpers import TESTS, jsonl, key_paths, read_text

CORPUS = TESTS / "fuzz" / "traces"
#: every named reader but hf (which hands files to ``datasets``)
NAMED = ["weka", "mooncake", "bailian", "copilot", "openai-log", "sharegpt", "native"]
VALID = None

#: corpus file -> (its format, or None when it has none; what its error names, or VALID)
CASES: dict[str, tuple[str | None, tuple[str, ...] | None]] = {
    "binary-garbage.jsonl": (None, ("not UTF-8",)),
    "not-utf8.jsonl": (None, ("not UTF-8",)),
    "latin1-in-a-string.json": ("weka", ("not UTF-8",)),
    "empty.jsonl": (None, ("empty file",)),
    "whitespace-only.jsonl": (None, ("empty file",)),
    "json-top-level-number.json": (None, ("not an object",)),
    "jsonl-lines-are-arrays.jsonl": (None, ("not an object",)),
    "truncated-json.json": ("weka", ("line 1 column", "JSON")),
    "truncated-last-line.jsonl": ("mooncake", ("line 2", "JSON")),
    "deeply-nested-array.json": (None, ("nested too deeply",)),
    "mooncake-deeply-nested-hash-ids.jsonl": ("mooncake", ("line 2", "nested too deeply")),
    "mooncake-integer-of-5000-digits.jsonl": ("mooncake", ("line 2", "too many digits")),
    "mooncake-nan-count.jsonl": ("mooncake", ("line 2", "'input_length'", "nan")),
    "mooncake-infinite-count.jsonl": ("mooncake", ("line 2", "'output_length'", "inf")),
    "mooncake-1e15-input-tokens.jsonl": ("mooncake", ("line 2", "'input_length'", "10,000,000")),
    "mooncake-10e15-output-tokens-as-integer.jsonl": (
        "mooncake", ("line 2", "'output_length'", "10,000,000")),
    "mooncake-negative-timestamp.jsonl": ("mooncake", ("line 2", "'timestamp'", "negative")),
    "mooncake-infinite-timestamp.jsonl": ("mooncake", ("line 2", "'timestamp'", "finite")),
    "mooncake-hash-ids-strings.jsonl": ("mooncake", ("line 2", "'hash_ids'")),
    "mooncake-hash-ids-object.jsonl": ("mooncake", ("line 2", "'hash_ids'")),
    "mooncake-hash-ids-nested-lists.jsonl": ("mooncake", ("line 2", "'hash_ids'")),
    "mooncake-more-hash-ids-than-tokens-allow.jsonl": (
        "mooncake", ("line 2", "'hash_ids'", "at most 1 blocks")),
    "valid-mooncake-first-line-over-64KiB.jsonl": ("mooncake", VALID),
    "first-line-over-64KiB-then-a-broken-line-2.jsonl": ("mooncake", ("line 2", "JSON")),
    "broken-first-line-over-64KiB.jsonl": ("mooncake", ("line 1", "JSON")),
    "valid-openai-log-first-line-over-64KiB.jsonl": ("openai-log", VALID),
    "valid-weka.json": ("weka", VALID),
    "weka-reversed-t.json": ("weka", ("requests[2]", "'t'", "before the previous")),
    "weka-subagent-reversed-t.json": (
        "weka", ("requests[1].requests[1]", "'t'", "before the previous")),
    "weka-negative-t.json": ("weka", ("requests[0]", "'t'", "negative")),
    "weka-1e15-input-tokens.json": ("weka", ("requests[1]", "'in'", "10,000,000")),
    "weka-block-size-zero.json": ("weka", ("'block_size'",)),
    "weka-models-not-a-list.json": ("weka", ("'models'",)),
    "weka-hash-ids-floats.json": ("weka", ("requests[0]", "'hash_ids'")),
    # numpy would read "2" as 2 and 2.7 as 2: every element is checked, not the first
    "weka-hash-ids-a-string-after-an-int.json": ("weka", ("requests[0]", "'hash_ids'",
                                                          "found '2'")),
    "weka-hash-ids-a-float-after-an-int.json": ("weka", ("requests[0]", "'hash_ids'",
                                                         "found 2.7")),
    "valid-bailian.jsonl": ("bailian", VALID),
    "bailian-negative-timestamp.jsonl": ("bailian", ("line 2", "'timestamp'", "negative")),
    "bailian-child-before-its-parent.jsonl": ("bailian", ("line 2", "'timestamp'", "before")),
    "bailian-1e15-output-tokens.jsonl": ("bailian", ("line 2", "'output_length'", "10,000,000")),
    "valid-copilot.json": ("copilot", VALID),
    "copilot-reversed-timestamps.json": (
        "copilot", ("record 0", "llm_calls[1].timestamp", "before the previous")),
    "copilot-negative-timestamp.json": ("copilot", ("llm_calls[0].timestamp", "negative")),
    "copilot-1e15-prompt-tokens.json": ("copilot", ("tokens.prompt", "10,000,000")),
    "openai-log-negative-timestamp.jsonl": ("openai-log", ("line 2", "'timestamp'", "negative")),
    "openai-log-end-before-start.jsonl": ("openai-log", ("line 1", "'end_timestamp'")),
    "openai-log-1e15-max-tokens.jsonl": ("openai-log", ("line 1", "'max_tokens'", "10,000,000")),
    "valid-sharegpt.json": ("sharegpt", VALID),
    "sharegpt-value-not-a-string.json": ("sharegpt", ("record 0", "conversations[0].value")),
    "valid-native.parquet": ("native", VALID),
    "native-reversed-t.parquet": ("native", ("turn 2", "'t'", "before the previous")),
    "native-negative-t.parquet": ("native", ("turn 0", "'t'")),
    "native-1e15-input-tokens.parquet": ("native", ("turn 0", "'input_tokens'", "10,000,000")),
    "native-truncated.parquet": ("native", ("not a readable parquet file",)),
}
FILES = sorted(CASES)


def one_line_error(path: Path, read: Any) -> InputError:
    """The InputError ``read()`` raises; it must be one line naming ``path``."""
    with pytest.raises(InputError) as e:
        read()
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    return e.value


def trace_or_one_line(path: Path, fmt: str | None, **options: Any) -> Trace | None:
    """A trace that validates, or None after a one-line InputError naming ``path``; any
    other exception fails the test."""
    try:
        tr = read_trace(path, format=fmt, **options)
    except InputError as e:
        assert "\n" not in str(e) and str(path) in str(e), str(e)
        return None
    tr.validate()
    return tr


def test_every_corpus_file_is_described() -> None:
    on_disk = {p.name for p in CORPUS.iterdir() if p.name != "README.md"}
    assert on_disk == set(CASES)
    assert len(on_disk) >= 20


@pytest.mark.parametrize("name", FILES)
def test_corpus_file_under_detection_and_its_reader(name: str) -> None:
    path = CORPUS / name
    fmt, expect = CASES[name]
    for how in dict.fromkeys([None, fmt]):  # detection, then the file's own reader
        if expect is VALID:
            tr = read_trace(path, format=how)
            tr.validate()
            assert tr.n_requests() >= 2
            continue
        e = one_line_error(path, lambda how=how: read_trace(path, format=how))
        for part in expect:
            assert part in str(e), (how, str(e))


@pytest.mark.parametrize("fmt", NAMED)
def test_every_corpus_file_under_every_named_reader(fmt: str) -> None:
    """A file read with a reader of another format may read (a Bailian file is also a
    valid Mooncake file) but otherwise fails in one line naming it."""
    outcomes = {name: trace_or_one_line(CORPUS / name, fmt) for name in FILES}
    own = [n for n in FILES if CASES[n][0] == fmt]
    assert all((outcomes[n] is None) == (CASES[n][1] is not VALID) for n in own)


# ---- token and hash id bounds -------------------------------------------------------

def test_the_token_bound_is_inclusive(tmp_path: Path) -> None:
    """MAX_TOKENS tokens read; one more is an error, on the fast and on the careful path
    of the Mooncake reader (a fifth key takes the careful one)."""
    for extra in ({}, {"session_id": "s"}):
        ok = {"timestamp": 0, "input_length": MAX_TOKENS, "output_length": MAX_TOKENS,
              "hash_ids": [], **extra}
        f = tmp_path / "t.jsonl"
        f.write_text(jsonl([ok]))
        assert read_trace(f).sessions[0].turns[0].input_tokens == MAX_TOKENS
        f.write_text(jsonl([ok, {**ok, "timestamp": 1, "input_length": MAX_TOKENS + 1}]))
        e = one_line_error(f, lambda f=f: read_trace(f))
        assert (e.where, e.field) == ("line 2", "input_length")


def test_a_hash_id_list_is_measured_before_it_is_converted() -> None:
    """A list longer than the tokens allow is refused by its length, before its items are
    looked at (so a million ids are not turned into an array first)."""
    from agentbench.traces.readers._fields import req_hash_ids

    with pytest.raises(InputError, match="3 hash ids but 100 input tokens allow at most 2"):
        req_hash_ids({"hash_ids": [1, 2, "not an id"]}, tokens=100, block_size=64)


# ---- folders: every bad file named, or skipped ---------------------------------------

def _folder(tmp_path: Path, files: dict[str, str]) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    for new, corpus_name in files.items():
        shutil.copy(CORPUS / corpus_name, d / new)
    return d


def test_a_folder_names_every_bad_file_and_skip_bad_reads_the_rest(tmp_path: Path) -> None:
    d = _folder(tmp_path, {"a.json": "weka-reversed-t.json", "b.json": "valid-weka.json",
                           "c.json": "weka-1e15-input-tokens.json"})
    e = one_line_error(d, lambda: read_trace(d))  # detection passes over the bad a.json
    assert isinstance(e, BadTraceFiles)
    msg = str(e)
    assert "2 of 3 trace files are bad" in msg
    assert f"{d / 'a.json'}:requests[2]: field 't'" in msg
    assert f"{d / 'c.json'}:requests[1]: field 'in'" in msg
    assert str(d / "b.json") not in msg
    assert e.lines()[1:] == [err.one_line() for err in e.errors] and len(e.lines()) == 3

    tr = read_trace(d, skip_bad=True)
    assert [s.session_id for s in tr.roots()] == ["w"] and tr.n_requests() == 3
    assert len(tr.skipped) == 2
    assert str(d / "a.json") in tr.skipped[0] and str(d / "c.json") in tr.skipped[1]


@pytest.mark.parametrize("fmt, good, bad", [
    ("weka", "valid-weka.json", "weka-negative-t.json"),
    ("mooncake", "valid-mooncake-first-line-over-64KiB.jsonl", "mooncake-nan-count.jsonl"),
    ("bailian", "valid-bailian.jsonl", "bailian-child-before-its-parent.jsonl"),
    ("copilot", "valid-copilot.json", "copilot-reversed-timestamps.json"),
    ("openai-log", "valid-openai-log-first-line-over-64KiB.jsonl", "not-utf8.jsonl"),
    ("sharegpt", "valid-sharegpt.json", "sharegpt-value-not-a-string.json"),
])
def test_every_folder_reader_skips_bad_files(tmp_path: Path, fmt: str, good: str,
                                             bad: str) -> None:
    suffix = Path(good).suffix
    d = _folder(tmp_path, {f"1{suffix}": bad, f"2{suffix}": good, f"3{suffix}": bad})
    e = one_line_error(d, lambda: read_trace(d, format=fmt))
    assert str(d / f"1{suffix}") in str(e) and str(d / f"3{suffix}") in str(e)
    tr = read_trace(d, format=fmt, skip_bad=True)
    alone = read_trace(CORPUS / good, format=fmt)
    assert tr.n_requests() == alone.n_requests() and len(tr.skipped) == 2


def test_skip_bad_with_nothing_left_and_skip_bad_of_the_wrong_kind(tmp_path: Path) -> None:
    d = _folder(tmp_path, {"a.json": "weka-negative-t.json", "b.json": "weka-reversed-t.json"})
    e = one_line_error(d, lambda: read_trace(d, format="weka", skip_bad=True))
    assert "all 2 trace files are bad (nothing left to read)" in str(e)
    with pytest.raises(InputError, match="expected true or false") as e2:
        read_trace(d, skip_bad="yes")  # type: ignore[arg-type]
    assert e2.value.field == "skip_bad"


def test_stats_cli_names_every_bad_file_or_skips_them(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    d = _folder(tmp_path, {"a.json": "weka-negative-t.json", "b.json": "valid-weka.json",
                           "c.json": "weka-reversed-t.json"})
    runner = CliRunner()
    res = runner.invoke(app, ["traces", "stats", str(d)])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 3, res.output
    assert all(ln.startswith("error: ") for ln in lines)
    assert str(d / "a.json") in lines[1] and str(d / "c.json") in lines[2]

    res = runner.invoke(app, ["traces", "stats", "--skip-bad", "--json", str(d)])
    assert res.exit_code == 0, res.output
    assert "skipped 2 bad trace file(s)" in res.output
    assert json.loads(res.stdout[res.stdout.index("{"):])["requests"] == 3


def test_convert_names_the_bad_files_skip_bad_left_out(tmp_path: Path) -> None:
    """``traces convert -O skip_bad=true`` wrote a trace without the folder's bad files and
    said nothing of them: the native file read as the whole trace."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    d = _folder(tmp_path, {"a.json": "weka-negative-t.json", "b.json": "valid-weka.json"})
    out = tmp_path / "t.parquet"
    res = CliRunner().invoke(app, ["traces", "convert", str(d), "-O", "skip_bad=true",
                                   "-o", str(out)])
    assert res.exit_code == 0 and out.exists(), res.output
    assert "skipped 1 bad trace file(s)" in res.output and str(d / "a.json") in res.output


def test_a_skipped_file_name_reaches_the_terminal_as_one_line(tmp_path: Path) -> None:
    """The error lines escape what a file name holds (a line break, an ESC); the warning of
    a skipped file printed it raw: two lines, or the terminal retitled or recoloured."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    d = _folder(tmp_path, {"a\nb.json": "weka-negative-t.json", "c.json": "valid-weka.json"})
    res = CliRunner().invoke(app, ["traces", "stats", "--skip-bad", str(d)])
    assert res.exit_code == 0, res.output
    warned = [ln for ln in res.output.splitlines() if ln.startswith("warning: ")]
    assert len(warned) == 2 and "a\\nb.json" in warned[1], res.output


def test_a_file_of_another_kind_in_a_folder_is_named_not_left_unread(tmp_path: Path) -> None:
    """A folder of Weka .json files with a .jsonl beside them (here a Mooncake trace): the
    weka reader reads .json files, and the .jsonl was left unread without a word (named
    ``a.jsonl``, it would have been read first and its format chosen). It is a bad file of
    the folder now: named in the error, or skipped and listed with ``skip_bad``."""
    from typer.testing import CliRunner

    from agentbench.cli import app

    d = _folder(tmp_path, {"a.json": "valid-weka.json",
                           "b.jsonl": "valid-mooncake-first-line-over-64KiB.jsonl"})
    e = one_line_error(d, lambda: read_trace(d))
    assert isinstance(e, BadTraceFiles) and "1 of 2 trace files are bad" in str(e)
    assert e.errors[0].one_line() == (
        f"{d / 'b.jsonl'}: a .jsonl file among the folder's .json trace files: not read (a "
        "trace of another format? read it on its own)")
    tr = read_trace(d, skip_bad=True)
    assert tr.n_requests() == read_trace(CORPUS / "valid-weka.json").n_requests()
    assert tr.skipped == [e.errors[0].one_line()]
    res = CliRunner().invoke(app, ["traces", "stats", str(d)])
    assert res.exit_code == 2 and str(d / "b.jsonl") in res.output, res.output
    res = CliRunner().invoke(app, ["traces", "stats", "--skip-bad", str(d)])
    assert res.exit_code == 0 and "skipped 1 bad trace file(s)" in res.output, res.output


def test_hidden_files_of_a_folder_are_left_out(tmp_path: Path) -> None:
    """A folder copied from a Mac holds a binary ``._name`` beside each file. Format
    detection left hidden files out, but the reader then read them as trace files: the
    folder was refused ("1 of 2 trace files are bad"). Both leave them out now."""
    d = _folder(tmp_path, {"a.json": "valid-weka.json"})
    (d / "._a.json").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    (d / ".b.json").write_text("{")
    tr = read_trace(d)
    assert tr.n_requests() == read_trace(CORPUS / "valid-weka.json").n_requests()
    assert tr.skipped == []


def test_a_folder_of_native_traces_is_one_line_naming_a_file_to_give(tmp_path: Path) -> None:
    """``traces stats DIR`` of native .parquet files said "not a readable parquet file
    (... is a directory)": the native reader reads one file, now said in one line that
    names one to give."""
    from typer.testing import CliRunner

    from agentbench.cli import app
    from agentbench.traces.sources import builtin_path

    d = tmp_path / "native"
    d.mkdir()
    for name in ("mooncake-synthetic", "claude-code-weka"):
        shutil.copy(builtin_path(name), d / f"{name}.parquet")
    says = (f"{d}: a folder of native .parquet traces (2 files): the native reader reads "
            f"one file; give one, e.g. {d / 'claude-code-weka.parquet'}")
    for fmt in (None, "native"):
        assert one_line_error(d, lambda f=fmt: read_trace(d, format=f)).one_line() == says
    res = CliRunner().invoke(app, ["traces", "stats", str(d)])
    assert res.exit_code == 2 and res.output == f"error: {says}\n", res.output


def test_scenario_skip_bad_reaches_the_trace(tmp_path: Path) -> None:
    import pydantic

    from agentbench.scenario.model import TraceSource
    from agentbench.traces.load import load_scenario_trace

    d = _folder(tmp_path, {"a.json": "weka-negative-t.json", "b.json": "valid-weka.json"})
    spec = TraceSource.model_validate({"source": str(d), "skip_bad": True,
                                       "filters": {"max_sessions": 1}})
    tr = load_scenario_trace(spec, seed=0)
    assert len(tr.skipped) == 1 and str(d / "a.json") in tr.skipped[0]
    with pytest.raises(BadTraceFiles):
        load_scenario_trace(TraceSource.model_validate({"source": str(d)}), seed=0)
    with pytest.raises(pydantic.ValidationError):
        TraceSource.model_validate({"source": str(d), "skip_bad": "yes"})
    with pytest.raises(InputError, match="trace.skip_bad"):
        load_scenario_trace(TraceSource.model_validate(
            {"source": str(d), "options": {"skip_bad": True}}), seed=0)


# ---- Hypothesis: random bytes, random JSON, damaged records --------------------------

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
READERS = st.sampled_from([None, *NAMED])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids,
                                                              max_size=4),
    max_leaves=12)


def fuzz_read(name: str, raw: bytes, fmt: str | None) -> Trace | None:
    """``read_text``, with the trace-or-one-line check of ``trace_or_one_line``."""
    try:
        tr: Trace = read_text(name, raw, fmt)
    except InputError as e:
        assert "\n" not in str(e) and name in str(e), str(e)
        return None
    tr.validate()
    return tr


@FUZZ
@given(st.binary(max_size=400), READERS, st.sampled_from(["x.jsonl", "x.json"]))
def test_random_bytes_are_a_trace_or_one_line(raw: bytes, fmt: str | None, name: str) -> None:
    fuzz_read(name, raw, fmt)


@FUZZ
@given(st.lists(JSON, min_size=1, max_size=4), READERS, st.booleans())
def test_random_json_is_a_trace_or_one_line(values: list[Any], fmt: str | None,
                                            as_lines: bool) -> None:
    if as_lines:
        fuzz_read("x.jsonl", "".join(json.dumps(v) + "\n" for v in values).encode(), fmt)
    else:
        fuzz_read("x.json", json.dumps(values[0]).encode(), fmt)


VALID_FILES = [(n, f) for n, (f, e) in CASES.items() if e is VALID and f != "native"
               and "64KiB" not in n]


@FUZZ
@given(st.sampled_from(VALID_FILES), st.data())
def test_a_valid_record_with_any_field_replaced_is_a_trace_or_one_line(
        case: tuple[str, str], data: st.DataObject) -> None:
    name, fmt = case
    path = CORPUS / name
    text = path.read_text()
    docs = ([json.loads(ln) for ln in text.splitlines() if ln.strip()]
            if path.suffix == ".jsonl" else [json.loads(text)])
    k = data.draw(st.integers(0, len(docs) - 1))
    where = data.draw(st.sampled_from(key_paths(docs[k])))
    node = docs[k]
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = data.draw(JSON)
    raw = ("".join(json.dumps(d) + "\n" for d in docs) if path.suffix == ".jsonl"
           else json.dumps(docs[0])).encode()
    for how in (None, fmt):
        fuzz_read(f"x{path.suffix}", raw, how)

