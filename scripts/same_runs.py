"""Check that two sets of run folders hold the same results (a restructuring's proof).

    python scripts/same_runs.py BEFORE_DIR AFTER_DIR

Run folders are matched by run id without its timestamp suffix. The parquet tables must be
equal row for row and column for column (names, types, values); run.json and summary.json
must be equal except for what differs between any two runs of one scenario: the run id,
wall-clock times, host, process id, git commit, output folder and the client's own health
readings.
Exit 0 when every folder matches, 1 with the first differences otherwise.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq

# keys whose values differ between two runs of the same scenario and seed by design
VOLATILE = {"run_id", "git_commit", "host", "start_wall", "end_wall", "pid",
            "wall_duration_ns", "client_health", "results_dir", "path", "dir",
            "digest"}  # summary.json's digest of its own text, the volatile keys included
TABLES = ("requests.parquet", "sessions.parquet", "server_metrics.parquet")


def _key(folder: Path) -> str:
    return re.sub(r"-\d{8}-\d{6}(-\d+)?$", "", folder.name)


def _diff_json(a: object, b: object, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in VOLATILE:
                continue
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'after' if k in b else 'before'}")
            else:
                _diff_json(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff_json(x, y, f"{where}[{i}]", out)
    elif isinstance(a, str) and isinstance(b, str) and re.search(r"\d{8}-\d{6}", a + b):
        if re.sub(r"\d{8}-\d{6}", "T", a) != re.sub(r"\d{8}-\d{6}", "T", b):
            out.append(f"{where}: {a!r} != {b!r}")
    elif a != b:
        out.append(f"{where}: {str(a)[:200]} != {str(b)[:200]}")


def compare(before: Path, after: Path) -> list[str]:
    out: list[str] = []
    for name in TABLES:
        fa, fb = before / name, after / name
        if fa.exists() != fb.exists():
            out.append(f"{name}: present in only one")
            continue
        if not fa.exists():
            continue
        ta, tb = pq.read_table(fa), pq.read_table(fb)
        if ta.schema.remove_metadata() != tb.schema.remove_metadata():
            out.append(f"{name}: schemas differ:\n{ta.schema}\n---\n{tb.schema}")
        elif not ta.equals(tb):
            cols = [c for c in ta.column_names if not ta[c].equals(tb[c])]
            out.append(f"{name}: {ta.num_rows} vs {tb.num_rows} rows; columns differ: {cols}")
    for name in ("run.json", "summary.json"):
        _diff_json(json.loads((before / name).read_text()),
                   json.loads((after / name).read_text()), name, out)
    return out


def main(argv: list[str]) -> int:
    before_dir, after_dir = Path(argv[0]), Path(argv[1])
    before = {_key(p): p for p in before_dir.iterdir() if (p / "run.json").exists()}
    after = {_key(p): p for p in after_dir.iterdir() if (p / "run.json").exists()}
    bad = 0
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            print(f"{key}: only in {'after' if key in after else 'before'}")
            bad += 1
            continue
        diffs = compare(before[key], after[key])
        print(f"{key}: {'identical' if not diffs else f'{len(diffs)} differences'}")
        for d in diffs[:20]:
            print("   ", d)
        bad += bool(diffs)
    print(f"{len(before)} run folders before, {len(after)} after, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
