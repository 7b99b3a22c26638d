"""Server-metrics samples kept as columns (``agentbench.results.samples``): the journal line
and the spooled rows of a ``SampleBlock`` read back as exactly its rows written one by one,
whatever the names, labels and values, and a killed run gets them back from the journal."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench.results import schema as records
from agentbench.results.journal import journal_rows
from agentbench.results.samples import SampleBlock, SeriesLayout, blocks_batch
from agentbench.results.writer import ResultsWriter, recover

SCHEMA = records.SERVER_METRICS_SCHEMA
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_labels = st.lists(st.tuples(_text, _text), max_size=3)
_value = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2**53, 2**53).map(float)


@st.composite
def _blocks(draw: st.DrawFn) -> list[SampleBlock]:
    n = draw(st.integers(0, 6))
    layout = SeriesLayout(draw(st.lists(_text, min_size=n, max_size=n)),
                          draw(st.lists(_labels, min_size=n, max_size=n)))
    return [SampleBlock(layout, draw(st.integers(0, 2**62)), draw(_text),
                        draw(st.lists(_value, min_size=n, max_size=n)))
            for _ in range(draw(st.integers(1, 4)))]


def _same(a: object, b: object) -> bool:
    """Equality that takes NaN as equal to NaN."""
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == \
        orjson.dumps(b, option=orjson.OPT_SORT_KEYS)


@settings(max_examples=150, deadline=None)
@given(_blocks(), st.integers(0, 10**6), st.integers(0, 30))
def test_a_block_line_reads_back_as_its_rows(tmp_path_factory: pytest.TempPathFactory,
                                             blocks: list[SampleBlock], first: int,
                                             cut: int) -> None:
    """Each block is one journal line; recovery reads it back as the rows of ``rows()``
    numbered from the line's sequence number, those the spool lacks (``after``: here
    anywhere, inside a block too, as a full disk's halved batches leave it) and no
    other, NaN and infinities included."""
    journal = tmp_path_factory.mktemp("j") / "server_metrics.parquet.journal.jsonl"
    lines, rows, seq = [], [], first
    for b in blocks:
        line = b.journal(seq)
        assert line.count(b"\n") == (1 if len(b) else 0)
        lines.append(line)
        rows += b.rows()
        seq += len(b)
    journal.write_bytes(b"".join(lines))
    after = first + cut
    got = journal_rows(journal, after, SCHEMA)
    want = rows[cut:]
    assert sum(x.num_rows for x in got) == len(want)
    if want:
        assert _same([r for x in got for r in x.to_pylist()],
                     pa.RecordBatch.from_pylist(want, schema=SCHEMA).to_pylist())


def test_a_block_line_that_does_not_pair_up_is_left_out(tmp_path: Path) -> None:
    """A block line whose series and values differ in number, or whose series is not
    [name, labels] pairs, gives no row; the lines around it read."""
    good = SampleBlock(_layout(), 7, "sim", [1.0, 2.0])
    journal = tmp_path / "server_metrics.parquet.journal.jsonl"
    bad = [b'2 {"endpoint":"sim","series":[["a",[]]],"time_ns":1,"values":[1.0,2.0]}\n',
           b'2 {"endpoint":"sim","series":["a","b"],"time_ns":1,"values":[1.0,2.0]}\n',
           b'2 {"endpoint":"sim","series":{},"time_ns":1,"values":[]}\n']
    journal.write_bytes(good.journal(0) + b"".join(bad) + good.journal(2))
    got = [r for b in journal_rows(journal, 0, SCHEMA) for r in b.to_pylist()]
    assert [(r["time_ns"], r["value"]) for r in got] == [(7, 1.0), (7, 2.0)] * 2


def test_a_block_line_spaced_otherwise_still_reads_past_after(tmp_path: Path) -> None:
    """A block line spaced otherwise than orjson writes it (``"series" : [...]``), whose
    first rows the spool holds: its rows past ``after`` come back (the reader once skipped
    it, looking for the key with its colon right after it)."""
    block = SampleBlock(_layout(), 7, "sim", [1.0, 2.0])
    spaced = block.journal(0).replace(b'"series":', b'"series" : ')
    journal = tmp_path / "server_metrics.parquet.journal.jsonl"
    journal.write_bytes(spaced)
    got = [r for b in journal_rows(journal, 1, SCHEMA) for r in b.to_pylist()]
    assert [(r["time_ns"], r["value"]) for r in got] == [(7, 2.0)]


@settings(max_examples=150, deadline=None)
@given(_blocks())
def test_columns_are_what_arrow_makes_of_the_rows(blocks: list[SampleBlock]) -> None:
    rows = [r for b in blocks for r in b.rows()]
    got = blocks_batch(blocks, SCHEMA)
    want = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    assert got.schema == want.schema and got.num_rows == want.num_rows
    assert _same(got.to_pylist(), want.to_pylist())


def _layout() -> SeriesLayout:
    return SeriesLayout(["vllm:num_requests_running", 'odd "name"\n'],
                        [[("model_name", "m"), ("instance", "0")], [("k", "é\\")]])


def test_rows_and_blocks_mixed_make_the_file_rows_make(tmp_path: Path) -> None:
    lay = _layout()
    blocks = [SampleBlock(lay, 10 * i, "sim", [float(i), math.nan if i == 2 else -i * 0.1])
              for i in range(4)]
    extra = [{"time_ns": 5, "endpoint": "http", "name": "x", "labels": None, "value": 1.5}]
    mixed, plain = tmp_path / "mixed", tmp_path / "plain"
    for d in (mixed, plain):
        d.mkdir()
    w = ResultsWriter(mixed)
    w.add_server_samples(blocks[0])
    w.add_server_samples(blocks[1])
    w.add_server_samples(extra)
    w.flush()  # blocks and rows so far: one spool message, as rows alone make
    import pyarrow.ipc as ipc

    with ipc.open_stream(mixed / (records.SERVER_METRICS_FILE + ".spool.arrows")) as r:
        assert [b.num_rows for b in r] == [5]
    w.add_server_samples(blocks[2])
    w.add_server_samples(blocks[3])
    w.close()
    w = ResultsWriter(plain)
    for rows in (blocks[0].rows(), blocks[1].rows(), extra, blocks[2].rows(),
                 blocks[3].rows()):
        w.add_server_samples(rows)
    w.close()
    a = (mixed / records.SERVER_METRICS_FILE).read_bytes()
    assert a == (plain / records.SERVER_METRICS_FILE).read_bytes()
    got = pq.read_table(mixed / records.SERVER_METRICS_FILE).to_pylist()
    assert [r["time_ns"] for r in got] == [0, 0, 10, 10, 5, 20, 20, 30, 30]
    assert got[1]["labels"] == [("k", "é\\")] and got[1]["name"] == 'odd "name"\n'
    assert math.isnan(got[6]["value"])


def test_a_killed_run_gets_its_blocks_back_from_the_journal(tmp_path: Path) -> None:
    lay = _layout()
    w = ResultsWriter(tmp_path)
    w.add_server_samples(SampleBlock(lay, 1, "sim", [1.0, 2.0]))
    w.flush()  # these two rows reach the spool
    w.add_server_samples(SampleBlock(lay, 2, "sim", [3.0, 4.0]))
    w.add_server_samples([{"time_ns": 3, "endpoint": "sim", "name": "y", "labels": [],
                           "value": 5.0}])
    # no close(): killed with three rows only in the journal
    journal = tmp_path / (records.SERVER_METRICS_FILE + ".journal.jsonl")
    assert len(journal_rows(journal, 2, SCHEMA)[0]) == 3
    assert records.SERVER_METRICS_FILE in recover(tmp_path)
    t = pq.read_table(tmp_path / records.SERVER_METRICS_FILE).to_pylist()
    assert [(r["time_ns"], r["value"]) for r in t] == [(1, 1.0), (1, 2.0), (2, 3.0),
                                                       (2, 4.0), (3, 5.0)]
    assert t[2]["labels"] == [("model_name", "m"), ("instance", "0")]


def test_nan_and_infinities_come_back_from_the_journal(tmp_path: Path) -> None:
    """JSON has no NaN (orjson writes null, which recovery refused in the required value
    column, so a killed run lost those rows): the journal writes them as text, and
    recovery reads them back, from sample blocks and from scraped rows alike."""
    w = ResultsWriter(tmp_path)
    w.add_server_samples(SampleBlock(_layout(), 1, "sim", [math.nan, math.inf]))
    w.add_server_samples([{"time_ns": 2, "endpoint": "http", "name": "g", "labels": None,
                           "value": -math.inf},
                          {"time_ns": 3, "endpoint": "http", "name": "g", "labels": None,
                           "value": 1.5}])
    # no close(): killed with every row only in the journal
    assert records.SERVER_METRICS_FILE in recover(tmp_path)
    got = [r["value"] for r in
           pq.read_table(tmp_path / records.SERVER_METRICS_FILE).to_pylist()]
    assert len(got) == 4 and math.isnan(got[0]) and got[1:] == [math.inf, -math.inf, 1.5]


def test_a_block_must_fit_its_layout() -> None:
    with pytest.raises(ValueError, match="3 values for 2 series"):
        SampleBlock(_layout(), 0, "sim", [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="one labels list per series"):
        SeriesLayout(["a"], [])


def test_labels_become_text_chunk_by_chunk() -> None:
    """``labels_as_text`` turns each chunk of the labels column into text on its own (a
    run sampled every millisecond has more label text than one Arrow string array holds):
    the same text as the column made one chunk, slices included, and none for no rows."""
    from agentbench.results.reader import labels_as_text

    blocks = [SampleBlock(_layout(), t, "sim", [float(t), 2.0]) for t in range(40)]
    table = pa.Table.from_batches([blocks_batch(blocks, SCHEMA)])
    whole = labels_as_text(table.combine_chunks()).column("labels").to_pylist()
    assert whole[:2] == ["model_name=m,instance=0", "k=é\\"]
    parts = pa.concat_tables([table.slice(0, 7), table.slice(7, 50), table.slice(57)])
    text = labels_as_text(parts).column("labels")
    assert text.num_chunks == 3 and text.to_pylist() == whole
    empty = labels_as_text(table.slice(0, 0))
    assert empty.num_rows == 0 and empty.schema.field("labels").type == pa.string()
