"""Scenario-loader fuzzing (issue #11): every broken scenario is one clear line naming the
file, line and key path, never a traceback, a hang or silent acceptance.

The corpus ``tests/fuzz/scenarios/`` holds small files, each named for what is wrong
(``valid-*`` ones must load); ``EXPECT`` says which key path (or "(yaml)", "(root)") the
first problem names and a piece of its message. Hypothesis then merges random YAML values
into a valid scenario at random key paths, feeds random bytes, and round-trips valid
scenarios through their dump."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentbench.errors import InputError
from agentbench.scenario.loading import (
    MAX_SCENARIO_CHARS,
    ScenarioError,
    check_scenario,
    expand_variants,
    load_scenario,
    parse_scenario,
)
from tests.helpers import SCENARIOS, TESTS, key_paths

CORPUS = TESTS / "fuzz" / "scenarios"
SHIPPED = sorted(SCENARIOS.glob("*.yaml"))

#: broken file -> (key path of the first problem, or None for a file that is not text;
#: a piece of the message)
EXPECT: dict[str, tuple[str | None, str]] = {
    # wrong types
    "bool-for-int-concurrency.yaml": ("load.concurrency", "not a boolean"),
    # finite, but the cost they give is not: summary.json could not hold it
    "gpu-hour-price-1e308.yaml": ("hardware.gpu_hour_usd", "less than or equal to 1000000"),
    "api-price-1e308.yaml": ("prices.input_per_mtok", "less than or equal to 1000000"),
    "gpus-subnormal.yaml": ("hardware.gpus", "greater than or equal to 0.001"),
    "bool-yes-for-int-instances.yaml": ("endpoints.0.instances", "not a boolean"),
    "string-for-number-timeout.yaml": ("endpoints.0.timeout_s", "not the string '30'"),
    "exponent-without-dot-is-a-string.yaml": ("load.rate_per_s", "1.0e+3"),
    "float-for-int-sessions.yaml": ("trace.sessions", "must be an integer"),
    "date-for-string-name.yaml": ("name", "not a date"),
    "binary-tag-for-string-name.yaml": ("name", "not binary data"),
    "set-tag-for-list-sessions.yaml": ("trace.filters.sessions", "not a set"),
    "list-instead-of-mapping-timing.yaml": ("timing", "must be a mapping"),
    "mapping-instead-of-list-endpoints.yaml": ("endpoints", "must be a list"),
    "scalar-instead-of-mapping-headers.yaml": ("endpoints.0.headers", "must be a mapping"),
    "int-for-list-or-string-command.yaml": ("server.command", "must be a string"),
    "empty-concurrency-list.yaml": ("load.concurrency", "positive"),
    # numbers
    "nan-time-scale.yaml": ("timing.time_scale", "finite"),
    "inf-duration.yaml": ("limits.duration_s", "finite"),
    "negative-inf-gpu-price.yaml": ("hardware.gpu_hour_usd", "finite"),
    "float-overflow-to-inf-rate.yaml": ("load.rate_per_s", "finite"),
    "huge-int-max-requests.yaml": ("limits.max_requests", "out of range"),
    "huge-int-5000-digits-seed.yaml": ("(yaml)", "integer far too long"),
    "huge-concurrency.yaml": ("load.concurrency", "at most 100,000"),
    # a duration or a scale whose nanoseconds overflow 64 bits: refused, not a traceback
    "duration-1e300-seconds.yaml": ("limits.duration_s", "at most 1e+09 s"),
    "timeout-1e20-seconds.yaml": ("endpoints.0.timeout_s", "at most 1e+09 s"),
    "time-scale-1e300.yaml": ("timing.time_scale", "less than or equal to 1000000"),
    "negative-duration.yaml": ("limits.duration_s", "greater than 0"),
    "negative-seed.yaml": ("seed", "greater than or equal to 0"),
    "zero-sessions.yaml": ("trace.sessions", "greater than 0"),
    "scale-below-minimum.yaml": ("trace.transform.scale", "0.001"),
    "retry-on-status-out-of-range.yaml": ("endpoints.0.retry.on.0", "599"),
    "error-rate-above-one.yaml": ("fail_on.error_rate", "less than or equal to 1"),
    # a session tree every 1e300 s: arrival times overflowed (a traceback)
    "rate-below-minimum.yaml": ("load", "at least 1e-06 session trees per second"),
    "rate-1e300.yaml": ("load.rate_per_s", "1e+300 per second is out of range"),
    # a sample a millisecond: a full disk, not a measurement
    "scrape-every-millisecond.yaml": ("server_metrics.interval_s",
                                      "greater than or equal to 0.1"),
    # keys
    "duplicate-key-name.yaml": ("(yaml)", "key 'name' is given twice"),
    "duplicate-section-load.yaml": ("(yaml)", "key 'load' is given twice"),
    "duplicate-key-in-endpoint.yaml": ("(yaml)", "key 'model' is given twice"),
    "unknown-top-level-key.yaml": ("concurency", "unknown key"),
    "unknown-nested-key.yaml": ("timing.tim_scale", "unknown key"),
    "int-key.yaml": ("1", "a key must be a string"),
    "null-key.yaml": ("(root)", "a key must be a string, not null"),
    "newline-in-key.yaml": ("na\\nme", "unknown key"),
    "missing-endpoint-kind.yaml": ("endpoints.0", "missing key 'kind' (one of: openai, simulated)"),
    "missing-trace-kind.yaml": ("trace", "missing key 'kind' (one of: file, synth)"),
    "missing-load-kind.yaml": ("load", "missing key 'kind' (one of: lanes, rate)"),
    "unknown-endpoint-kind.yaml": ("endpoints.0", "kind 'vllm' is not one of: openai, simulated"),
    "missing-required-model.yaml": ("endpoints.0.model", "required"),
    # values
    "url-without-scheme.yaml": ("endpoints.0.url", "http://"),
    "url-impossible-port.yaml": ("endpoints.0.url", "Port out of range"),
    "url-without-host.yaml": ("endpoints.0.url", "no host"),
    "url-with-space.yaml": ("endpoints.0.url", "http://"),
    "run-id-dotdot.yaml": ("output.run_id", "plain folder name"),
    "run-id-with-slash.yaml": ("output.run_id", "plain folder name"),
    "extra-body-nan.yaml": ("endpoints.0.extra_body", "temperature: nan is not a finite"),
    "extra-body-date.yaml": ("endpoints.0.extra_body", "since: date is not a JSON value"),
    "extra-body-sets-messages.yaml": ("endpoints.0.extra_body", "may not set messages"),
    "trace-source-nul-byte.yaml": ("trace.source", "a\\x00b"),
    "trace-source-name-too-long.yaml": ("trace.source", "no such file"),
    "virtual-clock-with-real-endpoint.yaml": ("(root)", "clock: virtual"),
    "recycle-without-bound.yaml": ("(root)", "so the run ends"),
    "variant-set-output-to-scalar.yaml": ("variants.0.set -> output", "must be a mapping"),
    "variant-sets-variants.yaml": ("variants.0.set.variants", "variants do not nest"),
    "variant-index-superscript-digit.yaml": ("variants.0.set.endpoints.\u00b2.router",
                                             "has no item"),
    "variant-name-used-twice.yaml": ("variants.1.name", "used twice"),
    # YAML itself
    "billion-laughs.yaml": ("(yaml)", "alias bomb"),
    "alias-cycle.yaml": ("(yaml)", "cycle"),
    "undefined-alias.yaml": ("(yaml)", "undefined alias 'nowhere'"),
    "deeply-nested-lists.yaml": ("(yaml)", "nested more than 64 levels"),
    "deeply-nested-mappings.yaml": ("(yaml)", "nested more than 64 levels"),
    "tab-indentation.yaml": ("(yaml)", "'\\t'"),
    "unclosed-bracket.yaml": ("(yaml)", "expected ',' or ']'"),
    "multiple-documents.yaml": ("(yaml)", "single document"),
    "python-object-tag.yaml": ("(yaml)", "python/object/apply:os.system"),
    "control-character.yaml": ("(yaml)", "#x0007"),
    "empty.yaml": ("(root)", "the file is empty"),
    "only-comments.yaml": ("(root)", "the file is empty"),
    "top-level-scalar.yaml": ("(root)", "not a string"),
    "top-level-list.yaml": ("(root)", "not a list"),
    # not text
    "binary-bytes.yaml": (None, "not a text (UTF-8) file"),
    "non-utf8-latin1.yaml": (None, "not a text (UTF-8) file: byte 9"),
    "utf16-with-bom.yaml": (None, "not a text (UTF-8) file"),
}
VALID = sorted(p.name for p in CORPUS.glob("valid-*.yaml"))
#: seconds any one file may take (the bombs are refused while read, not expanded)
BOUND_S = 2.0
#: bytes of Python memory any one file may take while loading
BOUND_BYTES = 32 << 20


def assert_one_clear_error(e: InputError, source: str) -> None:
    """The error is one printable line naming the file, and so is each of its problems."""
    text = str(e)
    assert "\n" not in text and text.isprintable(), text
    assert text.startswith(source), text
    for line in getattr(e, "lines", lambda: [text])():
        assert "\n" not in line and line.isprintable() and line.startswith(source), line
    if isinstance(e, ScenarioError):
        assert e.problems and all(p and m for p, _, m in e.problems), e.problems


def test_the_corpus_is_as_listed() -> None:
    names = {p.name for p in CORPUS.iterdir()}
    assert names == set(EXPECT) | set(VALID)
    assert len(EXPECT) >= 30 and len(VALID) >= 3


@pytest.mark.parametrize("name", VALID)
def test_valid_corpus_files_load(name: str) -> None:
    sc = load_scenario(CORPUS / name)
    assert sc.name == "fuzz"
    assert expand_variants(sc)


def test_unquoted_on_is_the_retry_key_not_a_boolean() -> None:
    sc = load_scenario(CORPUS / "valid-openai-retry-on-unquoted.yaml")
    assert sc.endpoints[0].retry.on == [429, 503, "connect"]


def test_a_variant_may_set_a_key_inside_an_optional_section_left_out() -> None:
    base = load_scenario(CORPUS / "valid-anchors-and-variants.yaml")
    same, tier = expand_variants(base)
    assert same.endpoints[0].instances == 2 and same.endpoints[0].shared_tier is None
    assert tier.endpoints[0].shared_tier.capacity_blocks == 1000  # not silently dropped


def test_a_merge_key_reads_as_yaml_has_it() -> None:
    """``<<: *base`` (a second endpoint as the first with a few keys changed) was refused
    as "could not determine a constructor for the tag 'tag:yaml.org,2002:merge'"; it now
    merges, the mapping's own keys over the merged ones; a key given twice among the
    mapping's own is still refused."""
    text = ("name: fuzz\nendpoints:\n  - &b {kind: simulated, name: a, instances: 2}\n"
            "  - <<: *b\n    name: b\n    instances: 3\n"
            "trace: {kind: synth, profile: codex, sessions: 1}\n"
            "load: {kind: lanes, concurrency: 1}\nlimits: {max_requests: 2}\n")
    sc = parse_scenario(text, "merge.yaml")
    assert [(e.name, e.kind, e.instances) for e in sc.endpoints] == [
        ("a", "simulated", 2), ("b", "simulated", 3)]
    with pytest.raises(ScenarioError, match="key 'name' is given twice"):
        parse_scenario(text.replace("    name: b\n", "    name: b\n    name: c\n"), "m.yaml")


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_broken_corpus_file_is_one_clear_line(name: str) -> None:
    path, fragment = EXPECT[name]
    source = str(CORPUS / name)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(InputError) as ei:
            load_scenario(CORPUS / name)
        took = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert took < BOUND_S and peak < BOUND_BYTES, (took, peak)
    e = ei.value
    assert_one_clear_error(e, source)
    if path is None:
        assert not isinstance(e, ScenarioError)
    else:
        assert isinstance(e, ScenarioError)
        assert e.problems[0][0] == path, e.problems
        assert f": {path}: " in str(e)
        if path != "(root)":  # a mapping, a document: the YAML tells the line
            assert e.problems[0][1], e.problems
    assert fragment in str(e), str(e)


@pytest.mark.parametrize("name", ["missing-endpoint-kind.yaml", "billion-laughs.yaml",
                                  "binary-bytes.yaml", "variant-name-used-twice.yaml"])
def test_validate_prints_one_error_line_per_problem(name: str) -> None:
    from typer.testing import CliRunner

    from agentbench.cli import app

    res = CliRunner().invoke(app, ["validate", str(CORPUS / name)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines and all(ln.startswith(f"error: {CORPUS / name}") for ln in lines), lines
    assert "Traceback" not in res.output


def test_a_10_mb_value_is_refused_unread(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    f.write_text((CORPUS / "valid-minimal-simulated.yaml").read_text()
                 + "description: " + "x" * 10_000_000 + "\n")
    t0 = time.perf_counter()
    with pytest.raises(InputError) as ei:
        load_scenario(f)
    assert time.perf_counter() - t0 < BOUND_S
    assert_one_clear_error(ei.value, str(f))
    assert f"larger than {MAX_SCENARIO_CHARS:,} bytes" in str(ei.value)
    with pytest.raises(ScenarioError) as si:
        parse_scenario(f.read_text(), source="big.yaml")
    assert si.value.problems[0][0] == "(root)" and "longer than" in str(si.value)


# ---------------------------------------------------------------- hypothesis

#: a valid scenario touching most sections, for random values to land in
BASE: dict[str, Any] = {
    "name": "fuzz", "description": "base", "seed": 3,
    "endpoints": [
        {"kind": "openai", "name": "real", "url": "http://127.0.0.1:8000", "model": "m",
         "headers": {"User-Agent": "fuzz"}, "extra_body": {"temperature": 0.5},
         "retry": {"max_attempts": 2, "on": [429, "connect"]}, "timeout_s": 30.0},
        {"kind": "simulated", "name": "sim", "instances": 2, "router": "cache_aware",
         "shared_tier": {"capacity_blocks": 100}, "cache_blocks": 1000},
    ],
    "trace": {"kind": "synth", "profile": "codex", "sessions": 3, "seed": 1,
              "filters": {"max_sessions": 3, "min_turns": 1},
              "transform": {"scale": 0.5, "max_context_tokens": 4096}},
    "load": {"kind": "lanes", "concurrency": [1, 2]},
    "timing": {"strategy": "original", "time_scale": 0.5, "idle_cap_s": 5.0},
    "warmup": {"enabled": True},
    "limits": {"max_sessions": 3, "duration_s": 60.0, "on_deadline": "cancel"},
    "prompt": {"shared_prefix_tokens": 16},
    "hardware": {"gpus": 2.0, "gpu_hour_usd": 3.5},
    "prices": {"input_per_mtok": 3.0, "cached_input_per_mtok": 0.3, "output_per_mtok": 15.0},
    "slos": {"ttft_ms": 2000.0},
    "server_metrics": {"enabled": False},
    "output": {"dir": "results", "run_id": "fuzz-run"},
    "fail_on": {"error_rate": 0.1},
    "variants": [{"name": "rr", "set": {"endpoints.1.router": "round_robin"}}],
}


PATHS = key_paths(BASE)
NAMES = sorted({p[-1] for p in PATHS if isinstance(p[-1], str)} | {
    "kind", "clock", "routing", "server", "api", "rate_per_s", "arrival", "source", "format",
    "options", "speedup", "preset", "block_size", "command", "health_url", "set"})
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(),
    st.sampled_from([0, -1, 2**63, -(2**63) - 1, 10**30, 10**300, 1e308, -0.0, 5e-324]),
    st.text(max_size=12), st.dates(),
    st.sampled_from(["openai", "simulated", "synth", "file", "lanes", "rate", "virtual",
                     "wall", "connect", "http://x:99999", "http://", "../x", "1e3", "yes",
                     "~", "*a", "&a", "!!python/object", "\t", ""]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(NAMES),
                                                      st.text(max_size=6)), inner, max_size=4)),
    max_leaves=12,
)
FAST = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


def _like(value: Any) -> st.SearchStrategy[Any]:
    """Values of the same YAML type as ``value``, so that some changes stay valid."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(0, 10_000)
    if isinstance(value, float):
        return st.floats(0.001, 1000.0)
    if isinstance(value, str):
        return st.sampled_from([value, value + "x", value.upper()])
    if isinstance(value, list) and all(isinstance(x, int) for x in value):
        return st.lists(st.integers(1, 8), min_size=1, max_size=3)
    return st.just(value)


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    """Put ``value`` at ``path``, making mappings on the way (an earlier change may have
    replaced part of the path)."""
    node: Any = data
    for i, part in enumerate(path):
        if isinstance(node, list) and not (isinstance(part, int) and part < len(node)):
            node.append(value)
            return
        if i == len(path) - 1:
            node[part] = value
        else:
            child = node.get(part) if isinstance(node, dict) else node[part]
            if not isinstance(child, dict | list):
                child = node[part] = {}
            node = child


def _outcome(text: str, base_dir: Path) -> Any:
    """The scenario, or None after checking the error is one clear line; any other
    exception fails the test."""
    try:
        sc = parse_scenario(text, source="fuzz.yaml")
        problems, _ = check_scenario(sc, base_dir, text)
        for variant in expand_variants(sc):
            assert variant.name.startswith(sc.name)
    except ScenarioError as e:
        assert_one_clear_error(e, "fuzz.yaml")
        event(f"error at {e.problems[0][0].split('.')[0]}")
        return None
    event("valid")
    for path, _, msg in problems:
        assert "\n" not in path + msg
    return sc


def _round_trips(sc: Any) -> None:
    """Dumped (as run.json records it) and read again, the scenario is the same; dumped
    without defaults, the clock-dependent defaults stay defaults too."""
    again = parse_scenario(yaml.safe_dump(sc.model_dump(mode="json")), source="dump.yaml")
    assert again == sc
    lean = parse_scenario(yaml.safe_dump(sc.model_dump(mode="json", exclude_unset=True)),
                          source="dump.yaml")
    assert lean == sc
    for clock in ("virtual", "wall"):
        assert lean.timing.idle_cap_for(clock) == sc.timing.idle_cap_for(clock)
        assert lean.server_metrics.interval_for(clock) == sc.server_metrics.interval_for(clock)


@FAST
@given(data=st.data())
def test_random_values_at_random_key_paths(data: st.DataObject, tmp_path_factory:
                                           pytest.TempPathFactory) -> None:
    import copy

    doc = copy.deepcopy(BASE)
    for _ in range(data.draw(st.integers(1, 3), label="changes")):
        path = data.draw(st.sampled_from(PATHS), label="path")
        how = data.draw(st.sampled_from(["like", "any", "new key below"]), label="how")
        if how == "new key below":
            path = (*path, data.draw(st.sampled_from(NAMES), label="key"))
        values = _like(_get(BASE, path)) if how == "like" else VALUES
        _set(doc, path, copy.deepcopy(data.draw(values, label="value")))
    sc = _outcome(yaml.safe_dump(doc, allow_unicode=True), tmp_path_factory.getbasetemp())
    if sc is not None:
        _round_trips(sc)


YAML_BITS = st.sampled_from(["[", "]", "{", "}", ":", ": ", ",", "- ", "&a ", "*a", "!!str ",
                             "!!python/name:os.system ", "? ", "|", ">", "#", "'", '"', "\t",
                             "\n", "\n  ", "---\n", "...\n", "%YAML 1.1\n", "\\", "\x00",
                             "\x85", "\ufeff", "1e3", ".nan", "<<: *a\n", "~"])


@FAST
@given(cut=st.integers(0, 400), bits=st.lists(YAML_BITS, min_size=1, max_size=6))
def test_random_yaml_punctuation_spliced_into_a_valid_file(
        cut: int, bits: list[str], tmp_path_factory: pytest.TempPathFactory) -> None:
    text = (CORPUS / "valid-openai-retry-on-unquoted.yaml").read_text()
    cut = min(cut, len(text))
    _outcome(text[:cut] + "".join(bits) + text[cut:], tmp_path_factory.getbasetemp())


@FAST
@given(raw=st.one_of(st.binary(max_size=600),
                     st.builds(lambda b, i: (CORPUS / "valid-minimal-simulated.yaml")
                               .read_bytes()[:i] + b, st.binary(max_size=40),
                               st.integers(0, 200))))
def test_random_bytes_as_a_scenario_file(raw: bytes,
                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    f = tmp_path_factory.getbasetemp() / "bytes.yaml"
    f.write_bytes(raw)
    try:
        load_scenario(f)
    except InputError as e:
        assert_one_clear_error(e, str(f))


@pytest.mark.parametrize("path", [*SHIPPED, *(CORPUS / n for n in VALID)],
                         ids=lambda p: p.name)
def test_valid_scenarios_round_trip_through_their_dump(path: Path) -> None:
    _round_trips(parse_scenario(path.read_text(encoding="utf-8-sig"), source=str(path)))


def test_the_hypothesis_base_is_valid_and_round_trips() -> None:
    sc = parse_scenario(yaml.safe_dump(BASE))
    assert sc.endpoints[1].shared_tier.capacity_blocks == 100
    _round_trips(sc)
