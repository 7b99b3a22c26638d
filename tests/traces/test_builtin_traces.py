"""The traces bundled in the package (builtin:NAME): equal to their originals read by their
own readers, described truly by their index, attributed, and read in less memory than
the JSON they came from. The native format's delta-encoded hash ids round-trip."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agentbench.errors import InputError
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.readers import native, read_trace
from agentbench.traces.sources import BUILTIN_DIR, builtin_index
from agentbench.traces.stats import trace_stats
from tests.helpers import ROOT

ORIGINALS = {  # builtin name -> (original under shared/traces, its format)
    "claude-code-weka": ("claude-code-weka", "weka"),
    "mooncake-conversation": ("mooncake/conversation_trace.jsonl", "mooncake"),
    "mooncake-synthetic": ("mooncake/synthetic_trace.jsonl", "mooncake"),
}


def _rel(path_or_source: str, traces: Path) -> str:
    path, sep, fmt = path_or_source.rpartition("#") if "#" in path_or_source else (
        path_or_source, "", "")
    return Path(path).resolve().relative_to(traces.resolve()).as_posix() + sep + fmt


@pytest.mark.parametrize("name", sorted(ORIGINALS))
def test_bundled_trace_equals_its_original(name: str, weka_dir: Path) -> None:
    """Same sessions in the same order, parent/subagent links, turns, times, token counts
    and hash ids; ``source`` (and Mooncake's per-file ``scope``) name the original file
    relative to the traces folder instead of an absolute path."""
    traces = weka_dir.parent
    rel, fmt = ORIGINALS[name]
    original = read_trace(str(traces / rel), format=fmt)
    bundled = read_trace(f"builtin:{name}")
    assert bundled.name == original.name
    assert [s.session_id for s in bundled.sessions] == [s.session_id for s in original.sessions]
    for b, o in zip(bundled.sessions, original.sessions, strict=True):
        assert (b.parent_id, b.relation, b.parent_turn, b.join_turn, b.model, b.start_s) == (
            o.parent_id, o.relation, o.parent_turn, o.join_turn, o.model, o.start_s)
        assert b.source == _rel(o.source, traces)
        assert b.scope == (_rel(o.scope, traces) if fmt == "mooncake" else o.scope)
        assert len(b.turns) == len(o.turns)
        for tb, to in zip(b.turns, o.turns, strict=True):
            assert (tb.turn, tb.t, tb.think_s, tb.api_s, tb.input_tokens, tb.output_tokens,
                    tb.block_size, tb.cached_tokens) == (
                to.turn, to.t, to.think_s, to.api_s, to.input_tokens, to.output_tokens,
                to.block_size, to.cached_tokens)
            assert np.array_equal(tb.hash_ids, to.hash_ids)


def test_weka_subagent_structure_survives(weka_trace: Trace) -> None:
    bundled = read_trace("builtin:claude-code-weka")
    assert [len(t) for t in bundled.trees()] == [len(t) for t in weka_trace.trees()]
    assert sum(s.relation == "spawn" for s in bundled.sessions) == 28
    assert len({s.parent_id for s in bundled.sessions if s.parent_id}) == 9


def test_index_facts_match_the_bundled_files() -> None:
    index = builtin_index()
    assert set(index) == set(ORIGINALS)
    for name, e in index.items():
        data = (BUILTIN_DIR / e["file"]).read_bytes()
        assert e["bytes"] == len(data)
        assert e["sha256"] == hashlib.sha256(data).hexdigest()
        st = trace_stats(read_trace(f"builtin:{name}"))
        f = e["facts"]
        assert (f["sessions"], f["roots"], f["spawns"], f["requests"]) == (
            st.sessions, st.roots, st.spawns, st.requests)
        assert f["input_tokens_p50"] == st.input_tokens["p50"]
        assert f["output_tokens_p50"] == st.output_tokens["p50"]
        assert f["potential_hit_rate"] == pytest.approx(st.potential_hit_rate, abs=1e-6)
    # the facts of shared/README.md
    assert index["claude-code-weka"]["facts"]["requests"] == 2790
    assert index["claude-code-weka"]["facts"]["potential_hit_rate"] == pytest.approx(0.951,
                                                                                     abs=1e-3)
    assert index["mooncake-conversation"]["facts"]["requests"] == 12031
    assert index["mooncake-synthetic"]["facts"]["potential_hit_rate"] == pytest.approx(
        0.651, abs=1e-3)


def test_bundle_is_attributed_and_packaged() -> None:
    notice = (BUILTIN_DIR / "NOTICE").read_text()
    assert "Apache License, Version 2.0" in notice
    assert "kv-cache-tester" in notice and "Callan Fox" in notice and "Mooncake" in notice
    assert "END OF TERMS AND CONDITIONS" in (BUILTIN_DIR / "LICENSE-APACHE-2.0").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    for pattern in ("traces/builtin/*.parquet", "traces/builtin/NOTICE",
                    "traces/builtin/LICENSE-APACHE-2.0"):
        assert pattern in pyproject


def test_nothing_shipped_points_beside_the_repository() -> None:
    hits = []
    for top in ("agentbench", "scenarios", "examples", "docs", "README.md"):
        p = ROOT / top
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()
                                          and "__pycache__" not in f.parts]
        hits += [str(f.relative_to(ROOT)) for f in files
                 if b"../shared" in f.read_bytes()]
    assert not hits


def test_scenario_sources_check(tmp_path: Path) -> None:
    from agentbench.scenario.loading import ScenarioError, load_scenario

    base = (ROOT / "scenarios" / "quickstart.yaml").read_text()
    for source, expect in (("builtin:nope", "no builtin trace 'nope'"),
                           ("cache:nope", "unknown corpus 'nope'")):
        p = tmp_path / "s.yaml"
        p.write_text(base.replace("builtin:claude-code-weka", source))
        with pytest.raises(ScenarioError, match=expect):
            load_scenario(p)
    assert load_scenario(ROOT / "scenarios" / "quickstart.yaml").trace.source == (
        "builtin:claude-code-weka")


def test_builtin_refuses_another_format() -> None:
    with pytest.raises(InputError, match="native parquet trace; drop format 'weka'"):
        read_trace("builtin:claude-code-weka", format="weka")


# -- the native format's memory and its delta encoding ---------------------------------


def _hash_bytes(trace: Trace) -> int:
    """Bytes the trace's hash ids hold, each shared buffer counted once."""
    seen: dict[int, int] = {}
    for s in trace.sessions:
        for t in s.turns:
            base = t.hash_ids.base if t.hash_ids.base is not None else t.hash_ids
            seen[id(base)] = base.nbytes
    return sum(seen.values())


def test_native_read_holds_fewer_hash_ids_than_the_json_read(weka_trace: Trace) -> None:
    """The JSON reader keeps one array per turn (turns x context); the native reader shares
    one buffer per run of turns that extend each other. A structural check, no timing:
    benchmarks/native_memory_bench.py measures peak RSS."""
    bundled = read_trace("builtin:claude-code-weka")
    assert _hash_bytes(bundled) * 5 < _hash_bytes(weka_trace)
    assert all(not t.hash_ids.flags.writeable for s in bundled.sessions for t in s.turns
               if len(t.hash_ids))


def _turn(i: int, ids: list[int]) -> Turn:
    return Turn(turn=i, t=float(i), think_s=0.5, api_s=None, input_tokens=64 * len(ids) + 1,
                output_tokens=3, hash_ids=np.array(ids, dtype=np.int64), block_size=64)


def _trace() -> Trace:
    """Turns that extend, repeat, shrink (a compaction), diverge after a shared prefix,
    and go empty; a child session; a session without turns."""
    a = Session("a", None, "root", None, None, "m", "x.json#weka", "a", 0.0, [
        _turn(0, [1, 2]), _turn(1, [1, 2, 3]), _turn(2, [1, 2, 3]), _turn(3, [1, 9]),
        _turn(4, [1, 9, 10, 11]), _turn(5, []), _turn(6, [7])])
    b = Session("a/s", "a", "spawn", 1, 3, None, "x.json#weka", "a", 2.0, [
        _turn(0, [1, 2, 5]), _turn(1, [1, 2, 5, 6])])
    c = Session("c", None, "root", None, None, None, "y.json#weka", "c", 1.0, [])
    return Trace([a, b, c], name="t")


def test_native_round_trip_of_every_prefix_shape(tmp_path: Path) -> None:
    tr = _trace()
    assert native.read(native.write(tr, tmp_path / "t.parquet")) == tr
    sessions, turns, name = native.read_tables(tmp_path / "t.parquet")
    assert name == "t" and sessions.num_rows == 3
    assert turns.column("hash_ids").to_pylist()[:4] == [[1, 2], [1, 2, 3], [1, 2, 3], [1, 9]]


def test_native_reads_the_first_layout(tmp_path: Path) -> None:
    """``native/1`` files (a whole hash_ids list per turn) still read, equal."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tr = _trace()
    sessions, turns = native.to_tables(tr)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, sessions.schema) as w:
        w.write_table(sessions)
    meta = {native.FORMAT_KEY: native.FORMAT_V1, native.SESSIONS_KEY: sink.getvalue().to_pybytes(),
            native.NAME_KEY: b"t"}
    pq.write_table(turns.replace_schema_metadata(meta), tmp_path / "v1.parquet")
    assert native.read(tmp_path / "v1.parquet") == tr


def test_native_names_a_bad_hash_prefix(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = native.write(_trace(), tmp_path / "t.parquet")
    table = pq.read_table(path)
    prefix = table.column("hash_prefix").to_pylist()
    prefix[1] = 5  # the previous turn has 2 ids
    i = table.schema.get_field_index("hash_prefix")
    table = table.set_column(i, "hash_prefix", [prefix])
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(InputError, match="hash_prefix 5 outside") as e:
        native.read(tmp_path / "bad.parquet")
    assert e.value.where == "row 1"


def test_memory_benchmark_runs() -> None:
    """The benchmark prints its table (figures not asserted: they depend on the machine)."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "native_memory_bench.py"),
                          "--quick"], capture_output=True, text=True, timeout=240, check=True)
    assert "native" in out.stdout and "peak" in out.stdout
