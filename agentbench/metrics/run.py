"""One results folder opened for analysis: ``Run`` (its raw tables as DataFrames with
per-request metrics added, and its summary) and ``load`` (``agentbench.load``). The summary
is computed here when the folder has none, which is why ``Run`` sits with the metrics
rather than with the results schema it reads."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from agentbench.results.reader import RunRecords
    from agentbench.results.timebase import TimeBase


# the raw stamps (integer ns since the run's start) of each table
REQUEST_TIMES = ("scheduled_ns", "sent_ns", "first_token_ns", "last_token_ns", "end_ns")
SESSION_TIMES = ("start_ns", "end_ns", "makespan_ns", "llm_wait_ns")


def _in_base(df: pd.DataFrame, cols: tuple[str, ...], factor: float, kind: str
             ) -> pd.DataFrame:
    """``df`` with its ns columns multiplied by ``factor`` (simulated time at speedup S:
    wall x S), kept integer where they were, and ``attrs["time_base"] = kind``."""
    import numpy as np

    df = df.copy()
    if factor != 1.0:
        for c in cols:
            if c in df.columns:  # int64 when no value is null, else float64 (pandas' read)
                v = df[c].to_numpy(dtype=np.float64, na_value=np.nan) * factor
                df[c] = np.round(v).astype(np.int64) if df[c].dtype.kind in "iu" else v
    df.attrs["time_base"] = kind
    return df


@dataclass
class Run:
    """One results folder: raw tables as DataFrames, and its summary (docs/metrics.md)."""

    path: Path
    summary: dict[str, Any]
    _records: RunRecords | None = field(default=None, repr=False)
    _requests: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.summary.get("run", {}).get("run_id") or self.path.name)

    @property
    def records(self) -> RunRecords:
        """The raw records as read by the metrics (token events kept in Arrow)."""
        if self._records is None:
            from agentbench.results.reader import read_records

            self._records = read_records(self.path)
        return self._records

    @property
    def time_base(self) -> TimeBase:
        """The base every time of this run is in (``kind``: "virtual", "simulated" or
        "wall"; ``factor``: reported = measured wall x factor), from the summary."""
        from agentbench.results.timebase import TimeBase

        tb = self.summary.get("time_base") or {}
        return TimeBase(kind=str(tb.get("kind") or "wall"),
                        factor=float(tb.get("factor") or 1.0), speedup=tb.get("speedup"),
                        note=str(tb.get("note") or "wall-clock time"),
                        warnings=list(tb.get("warnings") or []))

    @property
    def requests(self) -> pd.DataFrame:
        """Requests (warmup included, see ``phase``), plus per-request metrics: ttft_ms,
        tpot_ms, e2e_ms, schedule_lag_ms, output_tokens, context_tokens.

        Every time column is in one base, ``run.time_base`` (also
        ``requests.attrs["time_base"]``): the ns stamps (scheduled_ns ... end_ns, since the
        run's start) and the ms durations alike. In simulated time at speedup S that is
        the wall stamps x S, so schedule_lag_ms here is the wall lag x S, where the summary
        keeps schedule lag in wall time; ``run.records.requests`` has the raw stamps."""
        if self._requests is None:
            from agentbench.metrics.derive import derive

            rec = self.records
            tb = self.time_base
            d = derive(rec.requests, rec.events, tb.factor)
            self._requests = _in_base(rec.requests.assign(
                ttft_ms=d.ttft_ms, tpot_ms=d.tpot_ms, e2e_ms=d.e2e_ms,
                schedule_lag_ms=d.lag_ms * tb.factor, output_tokens=d.output_tokens,
                context_tokens=d.expected_input), REQUEST_TIMES, tb.factor, tb.kind)
        return self._requests

    @property
    def sessions(self) -> pd.DataFrame:
        """Sessions, their ns columns in ``run.time_base`` like ``requests``."""
        tb = self.time_base
        return _in_base(self.records.sessions, SESSION_TIMES, tb.factor, tb.kind)

    @property
    def server_metrics(self) -> pd.DataFrame:
        """Scraped Prometheus samples; ``labels`` as text ``k=v,k=v``."""
        return self.records.server_metrics

    @property
    def agents(self) -> pd.DataFrame:
        """One row per measured session tree (an agent with its subagents): requests,
        failed, good, good_share, outcome, met_slos, missed, makespan_s, llm_wait_s,
        slowdown, ttft_p50_ms, tokens (summary.json ``trees``, docs/metrics.md)."""
        import pandas as pd

        return pd.DataFrame(self.summary.get("trees") or {})

    def table(self, name: str) -> pd.DataFrame:
        """A per-group table of the summary as a DataFrame: ``by_turn``, ``by_context``
        or ``by_warmth`` (TTFT and hit rate per turn index, context bucket, cold vs warm)."""
        import pandas as pd

        keys = {"by_turn": ["turn"], "by_context": ["context_lo", "context_hi"],
                "by_warmth": ["warmth"]}
        if name not in keys:
            raise ValueError(f"no table {name!r}: by_turn, by_context or by_warmth")
        cols = [*keys[name], "requests", "failed", "ttft_ms_mean", "ttft_ms_p50",
                "ttft_ms_p90", "e2e_ms_p50", "hit_rate", "usage_requests",
                "potential_hit_rate", "input_tokens_mean"]
        rows = self.summary.get(name) or []
        return pd.DataFrame(rows) if rows else pd.DataFrame(columns=cols)

    @property
    def scenario(self) -> dict[str, Any]:
        return dict(self.records.run.get("scenario") or {})

    def __repr__(self) -> str:
        o = self.summary.get("overall", {})
        ttft = o.get("latency", {}).get("ttft_ms", {}).get("p50")
        n = o.get("requests", {}).get("total")
        shown = round(ttft, 1) if isinstance(ttft, float) else ttft
        sim = (self.summary.get("time_base") or {}).get("kind") in ("virtual", "simulated")
        return (f"Run({self.name!r}, requests={n}, ttft_p50_ms={shown}"
                f"{', simulated time' if sim else ''})")

    def _repr_markdown_(self) -> str:
        from agentbench.metrics import format_summary

        return "```\n" + format_summary(self.summary) + "\n```"


def load(run_dir: str | Path, *, refresh: bool = False) -> Run:
    """Open ``results/<run>/``. The summary is read from summary.json when it is newer
    than the records, else computed (and written) by ``agentbench.metrics.summarize``."""
    from agentbench.metrics import summarize
    from agentbench.metrics.summaryfile import read_summary, write_summary
    from agentbench.results import schema as R
    from agentbench.results.runfolder import run_folder

    p = run_folder(run_dir)
    sp = p / R.SUMMARY_FILE
    rp = p / R.REQUESTS_FILE
    from agentbench.results.spool import has_spools

    summary = None
    # newer than the rows and run.json (its GPUs, prices and SLOs, edited by hand),
    # intact (its digest: a file edited by hand or not a summary is computed again), and
    # made with the sessions rows still there (without them it warns of their loss)
    fresh = sp.exists() and rp.exists() and (p / R.SESSIONS_FILE).exists() and all(
        sp.stat().st_mtime >= f.stat().st_mtime for f in (rp, p / R.RUN_FILE) if f.exists())
    if not refresh and not has_spools(p) and fresh:
        summary = read_summary(sp)
    from agentbench.metrics.summary import SCHEMA_VERSION

    if summary is None or summary.get("schema_version") != SCHEMA_VERSION:
        summary = summarize(p, write=False)
        try:
            write_summary(sp, summary)
        except OSError as err:
            # a read-only folder or file system (a stored CI baseline; a run an earlier
            # version wrote, whose summary.json has no digest): computed, not written
            if not isinstance(err, PermissionError) and err.errno != errno.EROFS:
                raise
    return Run(p, summary)
