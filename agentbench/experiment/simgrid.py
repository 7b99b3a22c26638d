"""The active side of ``agentbench sim fit`` (issue #23): a small grid of requests sent to a
running OpenAI-compatible endpoint, whose runs the passive fit (``simfit``) then reads
(docs/simulator.md, "Fitting a preset").

The grid is made of traces, replayed by agentbench's own replay, so what it measures is
what a run measures:

* **prefill** (one lane): pairs of turns, a cold prompt of ``S`` tokens and then the same
  prompt extended by ``N`` new ones (cached ``S``), for ``S`` and ``N`` at several
  fractions of the context, repeated; a few tokens of output each;
* **decode** (one run per concurrency ``B``): ``2 B`` single-turn requests of short and
  long prompts, 64 output tokens each, so ``B`` decode together at a time;
* **save** (one lane): what a new task costs when an idle slot holds a prompt the engine
  has not saved yet (llama-server saves every idle slot's prompt to its host-RAM cache at
  each new task, and the whole server waits): rounds of a cold long prompt, then a short
  new prompt (its first token waits for the long one's save), then the short prompt
  extended by one block (nothing left to save: the same work without the save).
  ``simfit.save_cost`` reads it; an engine without such saves measures about 0.

Every run has its own seed, so no run reuses another's prompts from the engine's cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError

#: fractions of the context window: cold prompt sizes, then new tokens after one
PREFILL_SIZES = (1 / 16, 1 / 4, 1 / 2)
NEW_SIZES = (1 / 32, 1 / 8, 1 / 4)
DECODE_OUTPUT = 64
#: the decode runs' prompts, short then long, as fractions of the context window
DECODE_SIZES = (1 / 16, 1 / 2)
BLOCK = 16
#: the save probe's rounds, and its long prompt as a fraction of the context window: on a
#: virtual machine a save's first touch of memory costs many times a copy, once the memory
#: a process freed recently is used up (2026-12-05), so several rounds, their median
SAVE_ROUNDS = 8
SAVE_SIZE = 1 / 2
#: the trace name of the save probe, by which the fit knows its run
SAVE_TRACE = "sim-fit-save"


def _session(sid: str, sizes: list[int], output: int, next_id: list[int]) -> Any:
    """A session whose turn ``k`` repeats turn ``k - 1``'s prompt and adds to it."""
    from agentbench.traces.model import Session, Turn

    turns, ids = [], np.zeros(0, dtype=np.int64)
    for k, size in enumerate(sizes):
        need = -(-size // BLOCK) - len(ids)
        ids = np.concatenate([ids, np.arange(next_id[0], next_id[0] + need, dtype=np.int64)])
        next_id[0] += need
        turns.append(Turn(turn=k, t=0.0, think_s=0.0, api_s=None, input_tokens=size,
                          output_tokens=output, hash_ids=ids.copy(), block_size=BLOCK))
    return Session(session_id=sid, parent_id=None, relation="root", parent_turn=None,
                   join_turn=None, model=None, source="sim-fit-grid", scope="grid",
                   start_s=0.0, turns=turns)


def grid_traces(max_context: int, concurrency: tuple[int, ...], repeats: int = 2
                ) -> dict[str, tuple[Any, int]]:
    """The grid's traces by run name, each with the lanes it runs at."""
    from agentbench.traces.model import Trace

    if max_context < 256:
        raise InputError("must be at least 256 tokens", field="--max-context")
    out_room = DECODE_OUTPUT + 8
    ctx = max_context - out_room
    next_id = [1]
    pre = []
    for r in range(repeats):
        for s in PREFILL_SIZES:
            for n in NEW_SIZES:
                cold, more = int(ctx * s), int(ctx * n)
                if cold + more <= ctx:
                    pre.append(_session(f"p{r}-{cold}-{more}", [cold, cold + more], 4,
                                        next_id))
    out: dict[str, tuple[Any, int]] = {"grid-prefill": (Trace(pre, "sim-fit-prefill"), 1)}
    for b in concurrency:
        sizes = [int(ctx * f) for f in DECODE_SIZES]
        dec = [_session(f"d{b}-{i}", [sizes[i // b]], DECODE_OUTPUT, next_id)
               for i in range(2 * b)]
        out[f"grid-decode-c{b}"] = (Trace(dec, f"sim-fit-decode-c{b}"), b)
    save = []
    for r in range(SAVE_ROUNDS):
        save.append(_session(f"s{r}-long", [int(ctx * SAVE_SIZE)], 4, next_id))
        # a block and a half, then one more block: the same new tokens both times (the
        # simulator never reuses a prompt's last block, llama.cpp its last token)
        save.append(_session(f"s{r}-short", [BLOCK * 3 // 2, BLOCK * 5 // 2], 4, next_id))
    out["grid-save"] = (Trace(save, SAVE_TRACE), 1)
    return out


def run_grid(url: str, model: str, out_dir: Path, *, api: str = "chat",
             max_context: int = 4096, concurrency: tuple[int, ...] = (1, 2, 4, 8),
             timeout_s: float = 300.0, headers: dict[str, str] | None = None,
             progress: bool = False,
             on_start: Callable[[], None] | None = None) -> list[Path]:
    """Send the grid to the endpoint at ``url``; the run folders (in ``out_dir``). A probe
    request first measures how many of the engine's tokens one of agentbench's makes (its
    tokenizer may count the same text otherwise), so that no prompt of the grid exceeds
    ``max_context`` of the engine's tokens. ``on_start`` is called once ``out_dir`` is
    made: a folder that cannot be (``/proc/x``, a path through a file) is one InputError
    line before it (it was the OSError's line, exit 1)."""
    from agentbench.metrics.run import load
    from agentbench.traces.model import Trace

    ep = {"kind": "openai", "name": "engine", "url": url, "model": model, "api": api,
          "ignore_eos": True, "timeout_s": timeout_s, "headers": dict(headers or {})}
    _check_endpoint(ep)
    made = [d for d in (out_dir, *out_dir.parents) if not d.exists()]  # deepest first
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot make the grid's folder there ({e.strerror or e})",
                         source=str(out_dir), field="--grid-out") from None
    if on_start is not None:
        on_start()
    # seeds of their own: no run, of this grid or an earlier one, meets its prompts cached
    seed = int.from_bytes(os.urandom(4), "little") << 8
    probe_trace = out_dir / "grid-probe.parquet"
    had_trace = probe_trace.exists()  # an earlier grid's: overwritten, as every grid file
    try:
        probe = _replay(ep, out_dir, "grid-probe", Trace([_session("probe", [512], 4, [1])],
                                                        "sim-fit-probe"), 1, seed)
    except InputError:  # refused before a request (unreachable): nothing of it is left
        if not had_trace:
            probe_trace.unlink(missing_ok=True)
        for d in made:  # the folders this call made, while empty
            if any(d.iterdir()):
                break
            d.rmdir()
        raise
    req = load(probe).requests
    ok = req[(req["status"] == "ok") & req["prompt_tokens"].notna()]
    if not len(ok):
        from agentbench.scenario.yamlfile import one_line

        why = req["error_message"].dropna().astype(str).head(1).tolist()
        status = req["http_status"].dropna().astype(int).head(1).tolist()
        raise InputError("the probe request failed" + (f" (HTTP {status[0]})" if status else "")
                         + f": {one_line(why[0], 160) if why else 'no answer'}", source=url)
    ratio = max(1.0, float(ok["prompt_tokens"].iloc[0]) / float(ok["expected_input_tokens"]
                                                               .iloc[0]))
    dirs = [probe]
    traces = grid_traces(int(max_context / ratio), concurrency)
    for i, (name, (trace, lanes)) in enumerate(traces.items(), start=1):
        dirs.append(_replay(ep, out_dir, name, trace, lanes, seed + i))
    return dirs


def _check_endpoint(ep: dict[str, Any]) -> None:
    """The grid's endpoint as a scenario checks it, before its folder is made or anything
    is said: one line naming the option (``--endpoint notaurl`` was refused only after
    "profiling notaurl", as ``endpoints.0.url`` of a scenario the user never wrote)."""
    from pydantic import ValidationError

    from agentbench.scenario.endpoints import OpenAIEndpoint
    from agentbench.scenario.problems import validation_problems

    flags = {"url": "--endpoint", "model": "--served-model", "api": "--api",
             "headers": "--header"}
    try:
        OpenAIEndpoint.model_validate(ep)
    except ValidationError as e:
        where, _, why = validation_problems(e, {}, ep)[0]
        key = where.split(".")[0]
        raise InputError(why, field=flags.get(key, where)) from None


def _replay(ep: dict[str, Any], out_dir: Path, name: str, trace: Any, lanes: int,
            seed: int) -> Path:
    """One run of the grid: ``trace`` written beside it, replayed at ``lanes``."""
    from agentbench.replay import run
    from agentbench.scenario.loading import validate_data
    from agentbench.traces.readers.native import write

    path = write(trace, out_dir / f"{name}.parquet")
    sc = validate_data({
        "name": name, "seed": seed, "endpoints": [ep],
        "trace": {"kind": "file", "source": str(path)},
        "load": {"kind": "lanes", "concurrency": lanes},
        "timing": {"strategy": "think-only", "time_scale": 0.0},
        "limits": {"recycle": False},
        "output": {"dir": str(out_dir), "run_id": name},
    }, "sim fit grid")
    return Path(run(sc, progress=False).run_dir)
