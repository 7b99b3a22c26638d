"""The TraceLab reader (agentbench/traces/readers/tracelab.py) on TraceLab's own example
sessions (tests/traces/data/tracelab: NOTICE, CC BY 4.0) and on generated rounds: each
round's potential hit equals its recorded prefix wherever the trace model can say it."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agentbench.cli import app
from agentbench.errors import InputError
from agentbench.traces.readers import detect_format, read_trace
from agentbench.traces.readers import tracelab as T
from agentbench.traces.stats import potential_cached_tokens, trace_stats

SAMPLE = Path(__file__).parent / "data" / "tracelab" / "round_trace.jsonl"


def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


def _ts(s: str) -> float:
    return dt.datetime.fromisoformat(s).timestamp()


def _expected_potential(rows: list[dict[str, Any]], b: int) -> dict[tuple[str, int], int]:
    """Each round's prefix as the trace can share it: with the round before's prompt (k >
    0), or with the first rounds of earlier-sent sessions of its provider and model."""
    out: dict[tuple[str, int], int] = {}
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["session_id"], []).append(r)
    firsts: list[tuple[float, tuple[str, str], str]] = []
    for sid, rs in by.items():
        rs.sort(key=lambda r: r["round_index"])
        for k, r in enumerate(rs):
            prefix = min(r["prefix_tokens"], r["input_tokens_total"])
            if k:
                out[(sid, k)] = b * (min(prefix, rs[k - 1]["input_tokens_total"]) // b)
        firsts.append((_start(rs[0]), (rs[0]["provider"], rs[0]["model"]), sid))
    for start, key, sid in firsts:
        r0 = min(by[sid][0]["prefix_tokens"], by[sid][0]["input_tokens_total"])
        before = [min(by[o][0]["prefix_tokens"], by[o][0]["input_tokens_total"])
                  for s2, k2, o in firsts if k2 == key and s2 < start]
        out[(sid, 0)] = b * (min(r0, max(before, default=0)) // b)
    return out


def _start(r: dict[str, Any]) -> float:
    ins = [_ts(e["timestamp"]) for e in r["timing_events"]
           if e["event_type"] in ("user_message", "tool_result")]
    return max(ins)


def test_the_example_sessions_read_as_two_root_sessions(tmp_path: Path) -> None:
    assert detect_format(SAMPLE) == "tracelab"
    gz = tmp_path / "rounds.jsonl.gz"
    gz.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    assert detect_format(gz) == "tracelab"
    trace = read_trace(SAMPLE)
    # gzipped, the same sessions (only the file each names differs)
    assert [(s.session_id, s.start_s, s.turns) for s in read_trace(gz).sessions] == [
        (s.session_id, s.start_s, s.turns) for s in trace.sessions]
    rows = _rows()
    assert [s.session_id for s in trace.sessions] == list(dict.fromkeys(
        r["session_id"] for r in rows))
    assert [s.model for s in trace.sessions] == ["claude-opus-4-8", "gpt-5.4"]
    assert all(s.relation == "root" for s in trace.sessions)
    claude, codex = trace.sessions
    assert [t.input_tokens for t in claude.turns] == [
        r["input_tokens_total"] for r in rows if r["provider"] == "claude"]
    assert [t.output_tokens for t in codex.turns] == [
        r["output_tokens"] for r in rows if r["provider"] == "codex"]
    assert [t.cached_tokens for t in codex.turns] == [
        r["prefix_tokens"] for r in rows if r["provider"] == "codex"]
    # Claude's round 1 is sent at its tool result (05:40:51.123 in the file), 19.3 s after
    # round 0's last output (its tool call at 05:40:31.647); Codex's round 5 waits 6.3 s
    # for the user's next message
    r0, r1 = rows[0], rows[1]
    sent1 = max(_ts(e["timestamp"]) for e in r1["timing_events"]
                if e["event_type"] in ("user_message", "tool_result"))
    end0 = max(_ts(e["timestamp"]) for e in r0["timing_events"]
               if e["event_type"] in ("reasoning", "text", "tool_call"))
    assert claude.turns[1].think_s == pytest.approx(sent1 - end0)
    assert claude.turns[1].think_s == pytest.approx(19.3, abs=0.05)
    assert codex.turns[5].think_s == pytest.approx(6.3, abs=0.05)
    assert all(a.t <= b.t for s in trace.sessions
               for a, b in zip(s.turns, s.turns[1:], strict=False))


@pytest.mark.parametrize("block_size", [1, 16, 128])
def test_each_example_round_shares_its_recorded_prefix(block_size: int) -> None:
    trace = read_trace(SAMPLE, block_size=block_size)
    pot = potential_cached_tokens(trace.sessions)
    assert pot == _expected_potential(_rows(), block_size)
    claude = trace.sessions[0]
    if block_size == 1:  # Claude's prefixes all lie inside the round before's prompt
        assert [pot[(claude.session_id, k)] for k in range(1, 10)] == [
            t.cached_tokens for t in claude.turns[1:]]


def test_filters_by_provider_and_model() -> None:
    codex = read_trace(SAMPLE, providers="codex")
    assert [s.session_id[:6] for s in codex.sessions] == ["codex:"]
    assert len(read_trace(SAMPLE, models=["claude-opus-4-8", "gpt-x"]).sessions) == 1
    with pytest.raises(InputError, match="no session of the providers"):
        read_trace(SAMPLE, providers=["gemini"])
    with pytest.raises(InputError, match="unknown option 'provider'"):
        read_trace(SAMPLE, provider="codex")
    with pytest.raises(InputError, match="expected a name or a list"):
        read_trace(SAMPLE, models=[3])


def _one(tmp_path: Path, rows: list[Any], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


@pytest.mark.parametrize(("change", "field"), [
    ({"input_tokens_total": -1}, "input_tokens_total"),
    ({"input_tokens_total": 2**70}, "input_tokens_total"),
    ({"output_tokens": float("nan")}, "output_tokens"),
    ({"prefix_tokens": "12"}, "prefix_tokens"),
    ({"round_index": -2}, "round_index"),
    ({"session_id": None}, "session_id"),
    ({"timing_events": [{"event_type": "text", "timestamp": "yesterday"}]},
     "timing_events[0].timestamp"),
    ({"tools": [{"tool_wall_latency_ms": -5}]}, "tools[0].tool_wall_latency_ms"),
    # an unhashable event name was a TypeError traceback from the lookup in INPUTS
    ({"timing_events": [{"event_type": ["text"], "timestamp": "2026-01-01T00:00:00Z"}]},
     "timing_events[0].event_type"),
])
def test_a_bad_round_is_one_line_naming_its_line_and_field(
        tmp_path: Path, change: dict[str, Any], field: str) -> None:
    rows = _rows()[:3]
    rows[2] = {**rows[2], **change}
    p = tmp_path / "bad.jsonl"
    p.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in rows))
    with pytest.raises(InputError) as e:
        read_trace(p, format="tracelab")
    assert e.value.where == "line 3" and e.value.field == field, e.value.one_line()
    assert "\n" not in e.value.one_line()


def test_broken_files_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = gzip.compress(SAMPLE.read_bytes())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cannot read it"):
        read_trace(cut, format="tracelab")
    garbled = tmp_path / "garbled.jsonl.gz"  # a good header, damaged data
    garbled.write_bytes(data[:20] + bytes(b ^ 0x5A for b in data[20:200]) + data[200:])
    for fmt in ("tracelab", None):
        with pytest.raises(InputError):
            read_trace(garbled, format=fmt)
    monkeypatch.setattr(T, "MAX_LINE", 1000)  # an endless line stops at the bound
    with pytest.raises(InputError, match="a line over"):
        read_trace(SAMPLE, format="tracelab")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\x00\xff\xfe" * 100)
    with pytest.raises(InputError):
        read_trace(binary, format="tracelab")
    res = CliRunner().invoke(app, ["traces", "stats", str(cut)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output


def test_stats_give_the_per_provider_facts(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["traces", "stats", str(SAMPLE)])
    assert res.exit_code == 0, res.output
    assert "TraceLab" in res.output and "codex" in res.output and "claude" in res.output
    res = CliRunner().invoke(app, ["traces", "stats", str(SAMPLE), "--json"])
    facts = json.loads(res.output)["tracelab"]
    rows = _rows()
    codex = [r for r in rows if r["provider"] == "codex"]
    assert facts["codex"]["rounds"] == 9 and facts["claude"]["sessions"] == 1
    assert facts["codex"]["prefix_share"] == pytest.approx(
        sum(r["prefix_tokens"] for r in codex) / sum(r["input_tokens_total"] for r in codex))
    # tool seconds: internal latency when given, else wall (TraceLab's own rule)
    tools = [t for r in rows if r["provider"] == "claude" for t in r["tools"]]
    eff = [(t["tool_internal_latency_ms"] if t["tool_internal_latency_ms"] is not None
            else t["tool_wall_latency_ms"]) for t in tools]
    assert facts["claude"]["tool_s"]["mean"] is not None and max(eff) > 0
    assert trace_stats(read_trace(SAMPLE)).requests == 19


def test_the_release_entry_checks_its_pinned_hash(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`traces fetch tracelab` against a folder mirror holding other bytes: refused by the
    SHA-256 the release publishes, nothing usable left; the same file under a test entry
    fetches and reads as cache:NAME."""
    from agentbench.traces import fetch as F

    monkeypatch.setenv("AGENTBENCH_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "mirror" / "tracelab"
    folder.mkdir(parents=True)
    gz = gzip.compress(SAMPLE.read_bytes())
    (folder / "syfi_coding_trace.jsonl.gz").write_bytes(gz)
    res = CliRunner().invoke(app, ["traces", "fetch", "tracelab", "--mirror",
                                   str(tmp_path / "mirror")])
    assert res.exit_code == 2 and "9d265eae" in res.output, res.output
    assert F.manifest("tracelab") is None
    real = F.registry()["tracelab"]
    import hashlib

    test_entry = {"tracelab": F.Corpus(
        "tracelab", real.description, real.homepage, real.licence, real.format, real.path,
        [F.CorpusFile(real.files[0].name, real.files[0].url, hashlib.sha256(gz).hexdigest())])}
    F.fetch("tracelab", mirror=str(tmp_path / "mirror"), corpora=test_entry)
    path, fmt = F.resolve_cache("tracelab", test_entry)
    assert fmt == "tracelab" and read_trace(str(path), format=fmt).n_requests() == 19


# ------------------------------------------------------------------ generated rounds

@st.composite
def sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rounds of a few sessions, interleaved in the file, each a growing context whose
    recorded prefix is anything up to its own input (misses, resets, reaching into the
    previous response), with distinct start times."""
    rows: list[dict[str, Any]] = []
    n = draw(st.integers(1, 4))
    starts = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n, unique=True))
    for i, start in enumerate(starts):
        provider = draw(st.sampled_from(["codex", "claude"]))
        model = draw(st.sampled_from(["m1", "m2"]))
        t = float(start)
        inp = draw(st.integers(1, 3000))
        for k in range(draw(st.integers(1, 8))):
            if k:
                inp = max(1, inp + draw(st.integers(-500, 2000)))
            prefix = draw(st.integers(0, inp))
            events = [{"event_type": "user_message" if k == 0 else "tool_result",
                       "timestamp": _iso(t), "source": "x"},
                      {"event_type": "text", "timestamp": _iso(t + 1.5), "source": "x"}]
            rows.append({"provider": provider, "session_id": f"{provider}:s{i}",
                         "round_index": k, "model": model, "input_tokens_total": inp,
                         "prefix_tokens": prefix, "newly_append_tokens": inp - prefix,
                         "output_tokens": draw(st.integers(0, 400)),
                         "timing_events": events, "tools": []})
            t += 1.5 + draw(st.integers(0, 50))
    order = draw(st.permutations(range(len(rows))))
    return [rows[j] for j in order]  # sessions interleaved, rounds out of order


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(rows=sessions(), block_size=st.sampled_from([1, 7, 64]))
def test_every_generated_round_shares_its_recorded_prefix(
        rows: list[dict[str, Any]], block_size: int, tmp_path: Path) -> None:
    p = _one(tmp_path, rows, f"g{block_size}.jsonl")
    trace = read_trace(p, format="tracelab", block_size=block_size)
    assert potential_cached_tokens(trace.sessions) == _expected_potential(rows, block_size)
    for s in trace.sessions:  # turns in round order, as recorded
        mine = sorted((r for r in rows if r["session_id"] == s.session_id),
                      key=lambda r: r["round_index"])
        assert [t.input_tokens for t in s.turns] == [r["input_tokens_total"] for r in mine]


def test_a_folder_of_round_files(tmp_path: Path) -> None:
    folder = tmp_path / "rounds"
    folder.mkdir()
    lines = SAMPLE.read_text().splitlines(keepends=True)
    (folder / "a.jsonl").write_text("".join(x for x in lines if '"claude"' in x[:30]))
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(
        "".join(x for x in lines if '"codex"' in x[:30]).encode()))
    trace = read_trace(folder)
    assert [len(s.turns) for s in trace.sessions] == [10, 9]
    assert [s.scope for s in trace.sessions] == [str(folder / "a.jsonl"),
                                                 str(folder / "b.jsonl.gz")]
    shutil.copy(folder / "a.jsonl", folder / "c.jsonl")  # the same session twice
    with pytest.raises(InputError, match="duplicate session id"):
        read_trace(folder)
