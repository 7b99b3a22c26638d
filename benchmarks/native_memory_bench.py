"""Peak memory of reading a trace from its JSON and from agentbench's native parquet.

Each read runs in its own child process, which first imports the same modules (numpy,
pyarrow.parquet, every reader) and reads a tiny trace of each kind, so the figures differ
only by the read itself. It prints, per trace set and source: the child's peak RSS
(whole process), the RSS the read added and still holds, and the seconds it took.

Sets: the 40 bundled Claude Code traces (builtin:claude-code-weka against the JSON in
../shared/traces/claude-code-weka when that is there); the same 40 tiled ``--copies`` times
under fresh ids (a corpus the size of kv-cache-tester's 710 traces at 18 copies); and
``--larger DIR`` (a folder of Weka JSON files, e.g. a fetched cache:kv-cache-tester-weka,
used by default when fetched).

    python benchmarks/native_memory_bench.py [--copies 18] [--larger DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WEKA = ROOT.parent / "shared" / "traces" / "claude-code-weka"


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not inherited from the parent
    across fork + exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(source: str, fmt: str) -> None:
    """Measure one read (in a child process) and print its figures as JSON."""
    import gc

    import numpy as np
    import pyarrow.parquet  # noqa: F401

    from agentbench.traces.model import Session, Trace, Turn
    from agentbench.traces.readers import mooncake, native, read_trace, weka  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:  # warm up: one tiny read of each kind
        tiny = Trace([Session("w", None, "root", None, None, None, "w", "w", 0.0, [
            Turn(0, 0.0, 0.0, None, 64, 1, np.arange(1, dtype=np.int64), 64)])], name="w")
        read_trace(str(native.write(tiny, Path(tmp) / "w.parquet")))
        p = Path(tmp) / "w.json"
        p.write_text(json.dumps({"id": "w", "block_size": 64, "requests": [
            {"t": 0, "in": 64, "out": 1, "hash_ids": [1]}]}))
        read_trace(str(p), format="weka")
    gc.collect()
    before = _rss_mb()
    t0 = time.perf_counter()
    trace = read_trace(source, format=fmt or None)
    seconds = time.perf_counter() - t0
    gc.collect()
    print(json.dumps({
        "peak_mb": _peak_mb(),
        "held_mb": _rss_mb() - before, "seconds": seconds,
        "sessions": len(trace.sessions), "requests": trace.n_requests()}))


def measure(source: str, fmt: str = "") -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", source, fmt],
                         capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def tile(src: Path, copies: int, dest: Path) -> Path:
    """``copies`` of every Weka file of ``src`` under fresh ids (hash scopes stay apart)."""
    dest.mkdir(parents=True, exist_ok=True)
    for k in range(copies):
        for f in sorted(src.glob("*.json")):
            doc = json.loads(f.read_text())
            doc["id"] = f"{doc.get('id') or f.stem}-c{k}"
            (dest / f"{f.stem}-c{k}.json").write_text(json.dumps(doc))
    return dest


def row(label: str, what: str, r: dict[str, float]) -> str:
    return (f"{label:<28} {what:<8} {r['requests']:>9,.0f} {r['peak_mb']:>8,.0f} MB "
            f"{r['held_mb']:>8,.0f} MB {r['seconds']:>7.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=18, help="tiles of the 40 traces (0: none)")
    ap.add_argument("--larger", type=Path, help="a folder of Weka JSON traces")
    ap.add_argument("--quick", action="store_true", help="only the 40 bundled traces")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    import gc

    from agentbench.traces.fetch import corpus_dir, manifest
    from agentbench.traces.readers import native, read_trace

    print(f"{'trace set':<28} {'source':<8} {'requests':>9} {'peak RSS':>11} "
          f"{'held':>11} {'read':>9}")
    print(row("40 Claude Code (bundled)", "native", measure("builtin:claude-code-weka")))
    if WEKA.is_dir():
        print(row("40 Claude Code (bundled)", "json", measure(str(WEKA), "weka")))
    else:
        print(f"(no JSON originals at {WEKA}: the JSON side is skipped)")
    if args.quick:
        return
    larger: list[tuple[str, Path]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.copies and WEKA.is_dir():
            larger.append((f"40 x {args.copies} tiled", tile(WEKA, args.copies,
                                                             Path(tmp) / "tiled")))
        fetched = corpus_dir("kv-cache-tester-weka") / "files" / "traces"
        if args.larger:
            larger.append((args.larger.name, args.larger))
        elif manifest("kv-cache-tester-weka") is not None:
            larger.append(("kv-cache-tester (fetched)", fetched))
        for label, folder in larger:
            pq = native.write(read_trace(str(folder), format="weka"), Path(tmp) / "t.parquet")
            gc.collect()  # the children start from this process's memory
            print(row(label, "native", measure(str(pq))))
            print(row(label, "json", measure(str(folder), "weka")))


if __name__ == "__main__":
    main()
