"""Reading one results folder (docs/architecture.md#results-on-disk): the three parquet
tables and run.json, checked against ``agentbench.results.schema`` so a bad folder is one
line naming file and field. The folder itself (a run's, finished first when it was cut
short) is :mod:`agentbench.results.runfolder`'s to open."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentbench.errors import InputError
from agentbench.results import schema as R
from agentbench.results.rowtimes import check_events, check_row_times
from agentbench.results.runfolder import open_run_folder, read_run_json
from agentbench.results.runshape import check_run_shape
from agentbench.results.timebase import TimeBase, time_base

LIST_COLUMNS = ("token_event_ns", "token_event_tokens")


@dataclass
class Settings:
    """The parts of the scenario as run that metrics need (hardware, prices, SLOs)."""

    gpus: float = 1.0
    gpu_hour_usd: float | None = None
    prices: dict[str, float] | None = None
    slos: dict[str, float] = field(default_factory=dict)


@dataclass
class RunRecords:
    """One run's raw records. ``requests`` holds the scalar columns (one row per request);
    ``events`` the per-request token-event lists, row-aligned, kept in Arrow because
    turning millions of lists into Python objects is what makes summaries slow."""

    run_dir: Path
    requests: pd.DataFrame
    events: pa.Table
    sessions: pd.DataFrame
    server_metrics: pd.DataFrame
    run: dict[str, Any]
    settings: Settings
    time_base: TimeBase = field(default_factory=TimeBase)
    #: the optional tables the folder lacks (read as empty), for the summary to warn of
    missing: tuple[str, ...] = ()


# low-cardinality text columns read as dictionaries: integer codes without building
# a million Python strings (they become pandas categoricals)
DICTIONARY_COLUMNS = ("stage", "phase", "endpoint", "tree_id", "session_id", "relation",
                      "status")


def _read_table(path: Path, schema: pa.Schema, required: bool,
                dictionary: tuple[str, ...] = ()) -> pa.Table:
    if not path.exists():
        if required:
            raise InputError("file not found", source=str(path))
        return schema.empty_table()
    try:
        names = set(pq.read_schema(path).names)
        table = pq.read_table(path, read_dictionary=[c for c in dictionary if c in names])
    except (OSError, pa.ArrowInvalid) as e:
        raise InputError(f"not a readable parquet file ({e})", source=str(path)) from None
    for f in schema:
        if f.name not in table.column_names:
            if f.nullable:
                table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
                continue
            raise InputError("column missing", source=str(path), field=f.name)
        col = table.column(f.name)
        if pa.types.is_dictionary(col.type) and col.type.value_type == f.type:
            pass
        elif col.type != f.type:
            try:
                table = table.set_column(table.schema.get_field_index(f.name), f.name,
                                         col.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InputError(f"type {col.type}, expected {f.type}", source=str(path),
                                 field=f.name) from None
        if not f.nullable and table.column(f.name).null_count:
            idx = table.column(f.name).is_null().to_numpy(zero_copy_only=False).argmax()
            raise InputError("null in a required column", source=str(path),
                             where=f"row {int(idx)}", field=f.name)
    return table


def _only(table: pa.Table, statuses: tuple[str, ...], path: Path) -> None:
    """``status`` and ``phase`` hold only values a run writes (a table edited by hand
    whose ``status`` held numbers read as a run where nothing succeeded, a session phase
    spelled otherwise as a run without roots, without a word)."""
    for name, allowed in (("status", statuses), ("phase", R.PHASES)):
        other = set(table.column(name).unique().to_pylist()) - {*allowed, None}
        if other:
            raise InputError(f"value {sorted(map(str, other))[0]!r}, expected one of "
                             f"{', '.join(allowed)}", source=str(path), field=name)


def check_tables(d: Path) -> None:
    """Each parquet file of a run that needs no recovery has a readable footer, or one
    line names the one that does not: its rows were journaled only while the run went,
    so nothing is left to write it again from (``agentbench recover`` said "nothing to
    recover" of a cut or overwritten table, exit 0). So does requests.parquet missing
    (deleted since), which every reader needs; the other two read as empty without it."""
    gone = "the run ended, so its spool is gone: nothing is left to rebuild it from"
    if not (d / R.REQUESTS_FILE).exists():
        raise InputError(f"file not found; {gone}", source=str(d / R.REQUESTS_FILE))
    for name in (R.REQUESTS_FILE, R.SESSIONS_FILE, R.SERVER_METRICS_FILE):
        if (path := d / name).exists():
            try:
                pq.read_metadata(path)
            except (OSError, pa.ArrowInvalid) as e:
                raise InputError(f"not a readable parquet file ({e}); {gone}",
                                 source=str(path)) from None


def labels_as_text(table: pa.Table) -> pa.Table:
    """Replace the ``labels`` map column by its text form ``k=v,k=v`` (in stored order):
    hashable, filterable, and cheap to convert for millions of samples. Chunk by chunk:
    the labels of a run sampled every millisecond (150 million rows) are more than the
    2 GB of text one Arrow string array holds."""
    text = pa.chunked_array([_labels_text(c) for c in table.column("labels").chunks
                             if len(c)], pa.string())
    return table.set_column(table.schema.get_field_index("labels"), "labels", text)


def _labels_text(col: pa.MapArray) -> pa.Array:
    kv = pc.binary_join_element_wise(col.keys, col.items, "=")
    lists = pa.ListArray.from_arrays(col.offsets, kv)
    return pc.fill_null(pc.binary_join(lists, ","), "")


def read_settings(run: dict[str, Any], source: str) -> Settings:
    """Hardware, prices and SLOs from run.json's scenario (validated by the scenario's own
    models, so a typo is reported with its key path)."""
    from pydantic import ValidationError

    from agentbench.scenario.model import Hardware, Prices, SLOs

    sc = run.get("scenario") or {}
    if not isinstance(sc, dict):
        raise InputError("not a mapping", source=source, field="scenario")
    def check(key: str, model: Any) -> Any:
        try:
            return model.model_validate(sc.get(key) or {})
        except ValidationError as e:
            err = e.errors()[0]
            path = ".".join(["scenario", key, *(str(p) for p in err["loc"])])
            raise InputError(err["msg"], source=source, field=path) from None

    hw = check("hardware", Hardware)
    prices = check("prices", Prices) if sc.get("prices") else None
    slos = check("slos", SLOs)
    return Settings(
        gpus=hw.gpus, gpu_hour_usd=hw.gpu_hour_usd,
        prices=prices.model_dump() if prices else None,
        slos={k: v for k, v in slos.model_dump().items() if v is not None},
    )


def read_records(run_dir: str | Path, *, with_events: bool = True) -> RunRecords:
    """Read ``results/<run>/``; ``requests.parquet`` is required, the rest optional."""
    d = open_run_folder(run_dir)
    req = _read_table(d / R.REQUESTS_FILE, R.REQUESTS_SCHEMA, required=True,
                      dictionary=DICTIONARY_COLUMNS)
    _only(req, R.REQUEST_STATUSES, d / R.REQUESTS_FILE)
    check_row_times(req, d / R.REQUESTS_FILE)
    check_events(req, d / R.REQUESTS_FILE)
    events = req.select(list(LIST_COLUMNS)) if with_events else \
        R.REQUESTS_SCHEMA.empty_table().select(list(LIST_COLUMNS))
    scalar = [c for c in req.column_names if c not in LIST_COLUMNS]
    requests = req.select(scalar).to_pandas()
    ses = _read_table(d / R.SESSIONS_FILE, R.SESSIONS_SCHEMA, required=False)
    _only(ses, R.SESSION_STATUSES, d / R.SESSIONS_FILE)
    sessions = ses.to_pandas()
    sm_table = _read_table(d / R.SERVER_METRICS_FILE, R.SERVER_METRICS_SCHEMA, required=False)
    server_metrics = labels_as_text(sm_table).to_pandas()
    run = read_run_json(d)
    check_run_shape(run, str(d / R.RUN_FILE))
    settings = read_settings(run, str(d / R.RUN_FILE))
    # every run writes sessions.parquet (empty when no session ended): one that is not
    # there was lost, and the agents' figures fall back to their requests (summary warns)
    missing = () if (d / R.SESSIONS_FILE).exists() else (R.SESSIONS_FILE,)
    return RunRecords(d, requests, events, sessions, server_metrics, run, settings,
                      time_base(run), missing)
