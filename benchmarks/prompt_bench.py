"""The in-process simulator's prompt hashes: block hashes of every turn of a shipped trace's
sessions, built as a virtual-time replay builds them, against the builder they replaced.

    python benchmarks/prompt_bench.py                        # scale-out.yaml's trace
    python benchmarks/prompt_bench.py --scenario pd-ratio.yaml --sessions 100

``SegmentPrompt`` with the session's turns hashes each lineage of turns (each turn's hash
ids extending the previous turn's) once, and a turn only its tail
(``agentbench/prompts/segments.py``); ``ReferencePrompt`` (``tests/replay``) builds each
turn from the previous one. Figures: CPU microseconds a prompt for each, best of
``--repeat``, their ratio measured in the same run, and one digest over all the hashes of
each (they must be equal). Each session is built with two salts, as two trace copies.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentbench.prompts.segments import SegmentPrompt  # noqa: E402
from agentbench.replay.runsetup import load_trace  # noqa: E402
from agentbench.scenario.loading import expand_variants, load_scenario  # noqa: E402
from tests.replay.segments_reference import ReferencePrompt  # noqa: E402


def build_all(make: Any, sessions: list[Any], digest: bool = False) -> tuple[int, str]:
    """Every turn of ``sessions`` with two salts; (prompts, digest of their hashes when
    ``digest``: it costs more than a prompt, so timed runs leave it out)."""
    n, h = 0, hashlib.sha256()
    for salt in (1, 2):
        for s in sessions:
            b = make(salt, s)
            for k, t in enumerate(s.turns):
                p = b.build(t, s.turns[k + 1] if k + 1 < len(s.turns) else None)
                if digest:
                    h.update(p.hashes.tobytes())
                    h.update(str(p.tokens).encode())
                n += 1
    return n, h.hexdigest()[:16]


def best_cpu(make: Any, sessions: list[Any], repeat: int) -> tuple[float, int, str]:
    """Least CPU seconds of ``repeat`` runs, prompts built, digest (an untimed run)."""
    best, n = float("inf"), 0
    for _ in range(repeat):
        c0 = time.process_time()
        n, _ = build_all(make, sessions)
        best = min(best, time.process_time() - c0)
    return best, n, build_all(make, sessions, digest=True)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="scale-out.yaml")
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--block-size", type=int, default=16, help="the engine's block size")
    a = ap.parse_args()
    sc = expand_variants(load_scenario(ROOT / "scenarios" / a.scenario))[0]
    sessions = load_trace(sc).sessions[:a.sessions]
    lineage = best_cpu(lambda salt, s: SegmentPrompt(salt, s.session_id, 10, 0, True,
                                                     a.block_size, s.turns),
                       sessions, a.repeat)
    ref = best_cpu(lambda salt, s: ReferencePrompt(salt, s.session_id, 10, 0, True,
                                                   a.block_size), sessions, a.repeat)
    for name, (cpu, n, digest) in (("lineages hashed once", lineage),
                                   ("turn by turn (reference)", ref)):
        print(f"{name:26s} {n:,} prompts  {cpu / n * 1e6:6.1f} us a prompt  digest {digest}")
    print(f"ratio {ref[0] / lineage[0]:.2f}x; hashes "
          f"{'equal' if lineage[2] == ref[2] else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
