"""Every scenario in scenarios/ validates; typos and bad values are errors with key paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbench.scenario.loading import ScenarioError, load_scenario, parse_scenario
from tests.helpers import SCENARIOS as SCENARIO_DIR
from tests.helpers import SHARED_TRACES

SCENARIOS = sorted(SCENARIO_DIR.glob("*.yaml"))

MINIMAL = """
name: t
endpoints:
  - kind: openai
    url: http://localhost:8000
    model: m
trace: {kind: synth, profile: codex, sessions: 3}
load: {kind: lanes, concurrency: 2}
limits: {max_sessions: 3}
"""


def test_there_are_scenarios() -> None:
    assert len(SCENARIOS) >= 3


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_scenario_validates(path: Path) -> None:
    if "shared/traces" in path.read_text() and not SHARED_TRACES.exists():
        pytest.skip("scenario reads ../shared/traces, which is missing here")
    sc = load_scenario(path)
    assert sc.name == path.stem


def test_minimal_scenario_defaults() -> None:
    sc = parse_scenario(MINIMAL)
    assert sc.timing.strategy == "think-only"
    assert sc.timing.idle_cap_s == 10.0
    assert sc.seed == 0
    assert sc.endpoints[0].api == "chat"


def problems(text: str) -> list[tuple[str, int | None, str]]:
    with pytest.raises(ScenarioError) as ei:
        parse_scenario(text, source="s.yaml")
    return ei.value.problems


def test_typo_is_an_error_with_path_and_line() -> None:
    text = MINIMAL.replace("    model: m\n", "    modle: m\n")
    got = {p for p, _, _ in problems(text)}
    assert "endpoints.0.modle" in got
    assert "endpoints.0.model" in got  # the real key is now missing
    line = next(ln for p, ln, _ in problems(text) if p == "endpoints.0.modle")
    assert line == 6


def test_every_problem_is_reported() -> None:
    text = MINIMAL.replace("concurrency: 2", "concurrency: [2, 0]").replace(
        "max_sessions: 3}", "max_sessions: 3, on_deadline: later}"
    ) + "timing: {strategy: fast}\n"
    got = {p for p, _, _ in problems(text)}
    assert {"load.concurrency", "limits.on_deadline", "timing.strategy"} <= got


def test_a_url_without_a_scheme_is_an_error() -> None:
    got = problems(MINIMAL.replace("http://localhost:8000", "localhost:8000"))
    assert got == [("endpoints.0.url", 5, "must start with http:// or https://")]


def test_unknown_kind_names_the_endpoint() -> None:
    text = MINIMAL.replace("kind: openai", "kind: openia")
    assert [p for p, _, _ in problems(text)] == ["endpoints.0"]


def test_unbounded_recycling_run_is_rejected() -> None:
    text = MINIMAL.replace("limits: {max_sessions: 3}\n", "")
    msgs = [m for _, _, m in problems(text)]
    assert any("so the run ends" in m for m in msgs)


def test_yaml_syntax_error_has_a_line() -> None:
    got = problems("name: [unclosed\n")
    assert got[0][0] == "(yaml)" and got[0][1] is not None


def test_missing_trace_file_is_reported(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(MINIMAL.replace("{kind: synth, profile: codex, sessions: 3}",
                                 "{kind: file, source: traces/nope.jsonl}"))
    with pytest.raises(ScenarioError) as ei:
        load_scenario(f)
    assert ei.value.problems[0][0] == "trace.source"


def test_relative_trace_path_is_resolved_from_the_scenario_folder(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.jsonl").write_text("")
    f = tmp_path / "s.yaml"
    f.write_text(MINIMAL.replace("{kind: synth, profile: codex, sessions: 3}",
                                 "{kind: file, source: traces/t.jsonl}"))
    sc = load_scenario(f)
    assert Path(sc.trace.source) == (tmp_path / "traces" / "t.jsonl").resolve()


VARIANTS = MINIMAL.replace(
    "  - kind: openai\n    url: http://localhost:8000\n    model: m\n",
    "  - kind: simulated\n    instances: 4\n",
) + """variants:
  - name: rr
    set: {endpoints.0.router: round_robin}
  - name: tier
    set:
      endpoints.0.router: round_robin
      endpoints.0.shared_tier: {capacity_blocks: 1000}
"""


def test_variants_expand_to_one_scenario_each() -> None:
    from agentbench.scenario.loading import expand_variants

    sc = parse_scenario(VARIANTS)
    rr, tier = expand_variants(sc)
    assert (rr.name, tier.name) == ("t-rr", "t-tier")
    assert rr.endpoints[0].router == "round_robin" and rr.endpoints[0].shared_tier is None
    assert tier.endpoints[0].shared_tier.capacity_blocks == 1000
    assert not rr.variants and sc.endpoints[0].instances == 4  # the base is untouched


def test_a_bad_variant_key_is_reported_with_its_path() -> None:
    text = VARIANTS.replace("endpoints.0.router: round_robin}", "endpoints.0.routr: x}")
    got = problems(text)
    assert any(p.startswith("variants.0.set") and "routr" in p for p, _, _ in got), got
    text = VARIANTS.replace("endpoints.0.router: round_robin}", "endpoints.5.router: x}")
    got = problems(text)
    assert got[0][0] == "variants.0.set.endpoints.5.router" and "no item 5" in got[0][2]


@pytest.mark.parametrize(("key", "where"), [
    ("format", "trace.format"), ("source", "trace.source"),
    ("sessions", "trace.filters.sessions")])
def test_a_reader_option_naming_read_traces_own_argument_is_a_problem(
        key: str, where: str) -> None:
    """``trace.options: {format: weka}`` validated, then the run's read_trace call failed
    with a TypeError traceback (two values for one argument)."""
    text = MINIMAL.replace("trace: {kind: synth, profile: codex, sessions: 3}",
                           f"trace: {{kind: file, source: x.jsonl, options: {{{key}: x}}}}")
    got = problems(text)
    assert any(p == "trace.options" and f"set {where}" in m for p, _, m in got), got


def test_a_rate_with_the_traces_own_arrivals_is_an_error() -> None:
    """``arrival: trace`` starts trees at the trace's own times: a ``rate_per_s`` beside
    it (a list too, read as a sweep) was dropped without a word, one stage ``trace``."""
    text = MINIMAL.replace("load: {kind: lanes, concurrency: 2}",
                           "load: {kind: rate, arrival: trace, rate_per_s: [1.0, 2.0]}")
    assert problems(text) == [("load", 8, "rate_per_s is not for arrival: trace (trees "
                                          "start at the trace's own times); drop it, or "
                                          "choose poisson or constant")]
    parse_scenario(text.replace(", rate_per_s: [1.0, 2.0]", ""))


def test_set_reaches_one_key_of_a_variants_set() -> None:
    """``--set variants.1.set.endpoints.0.router=...``: a variant's ``set`` has dotted keys,
    but the path went on splitting at their dots, making ``endpoints`` a mapping there
    ('variants.1.set -> endpoints: must be a list, not a mapping', at the file's line)."""
    from agentbench.scenario.loading import expand_variants, parse_set

    text = MINIMAL + ("variants:\n  - name: a\n  - name: b\n"
                      "    set: {endpoints.0.model: other}\n")
    sc = parse_scenario(text, sets=[parse_set("variants.1.set.endpoints.0.url=http://h:1"),
                                    parse_set("variants.0.set.limits.max_sessions=2")])
    a, b = expand_variants(sc)
    assert (b.endpoints[0].url, b.endpoints[0].model) == ("http://h:1", "other")
    assert (a.limits.max_sessions, b.limits.max_sessions) == (2, 3)
    assert sc.variants[1].set == {"endpoints.0.model": "other",
                                  "endpoints.0.url": "http://h:1"}
