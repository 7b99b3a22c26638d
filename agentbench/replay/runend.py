"""The folder of a run that did not complete (``runner``): removed when it holds nothing
but agentbench's own empty start, and the one line a run stopped by its disk ends with."""

from __future__ import annotations

import shlex
from pathlib import Path

from agentbench.errors import ResultsWriteError


def remove_empty_run(run_dir: Path) -> None:
    """Remove a run folder that holds nothing but agentbench's own empty start (a run refused
    at its preflight, or stopped before its run.json was written); one with anything else
    in it (an engine's log) stays."""
    import shutil

    from agentbench.results import schema as records
    from agentbench.results.rundir import CLAIM_FILE, RUN_TMP_FILE
    from agentbench.results.spool import JOURNAL_SUFFIX, RESERVE_FILE, SCHEMAS, SPOOL_SUFFIX

    ours = {records.RUN_FILE, RUN_TMP_FILE, CLAIM_FILE, RESERVE_FILE, *SCHEMAS}
    names = [p.name for p in run_dir.iterdir()]
    if all(n in ours or n.endswith((SPOOL_SUFFIX, JOURNAL_SUFFIX)) for n in names):
        shutil.rmtree(run_dir, ignore_errors=True)


def stopped_by(failure: ResultsWriteError, run_dir: Path) -> ResultsWriteError:
    """The one line a run stopped by its disk ends with: what failed, what was kept, and
    how to finish the files once there is room."""
    from agentbench.results.spool import has_spools

    if has_spools(run_dir):
        failure.hint = (f"free space, then `agentbench recover {shlex.quote(str(run_dir))}` "
                        "writes the parquet files")
    failure.args = (failure.one_line(),)
    return failure
