"""TraceLab coding-agent rounds (github.com/uw-syfi/TraceLab, dataset CC BY 4.0): JSONL,
plain or gzipped, one LLM call ("round") of Codex or Claude Code per line, read streaming.

A round gives ``session_id``, ``round_index``, ``provider``, ``model``,
``input_tokens_total = prefix_tokens + newly_append_tokens`` (``prefix_tokens``: the
provider's prompt-cache hit), ``output_tokens`` (reasoning included) and
``timing_events`` (ISO-8601 UTC; inputs ``user_message`` / ``tool_result`` first, then the
model's ``reasoning`` / ``text`` / ``tool_call``, Codex ending with ``usage_report``).

* **Sessions** are ``session_id``s, turns in ``round_index`` order (ties in line order: the
  corpus repeats some pairs). Every session is a root: the released rows mark no Claude
  sidechain and no Codex parent (docs/traces.md, "TraceLab").
* **Times.** A round's request leaves at its last input event before its first output
  (else the previous round's end); it ends at its last output event. ``think_s`` is the
  gap from the previous round's end (tool runs and human waits), ``api_s`` the round's
  own span, ``t`` from the session's first request.
* **Hash ids** make each round share exactly its recorded prefix with the round before
  (so the potential hit rate is the recorded prefix share), in ``block_size`` blocks
  (exact with 1): the shared blocks are the previous prompt's, the rest fresh; a prefix
  reaching past the previous prompt (into its response: Codex, a few hundred tokens)
  stops there. A session's first round shares its prefix with the first rounds of the
  sessions before it of the same provider and model (the system prompt and tools a
  prompt cache held from earlier sessions). ``cached_tokens`` keeps the recorded prefix.
* **Options**: ``providers`` and ``models`` (a name or a list) keep only those sessions;
  ``block_size`` (default 16).

``rounds(path)`` yields the compact rows both ``read`` and ``facts`` (per-provider figures
with tool times, ``traces stats``) are built from.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.readers import read_files
from agentbench.traces.readers._fields import (
    MAX_LINE,
    check_block_size,
    iter_jsonl,
    open_lines,
    req_tokens,
)
from agentbench.traces.readers._text import reject_unknown

BLOCK_SIZE = 16
INPUTS = frozenset({"user_message", "tool_result"})
OUTPUTS = frozenset({"reasoning", "text", "tool_call"})
SUFFIXES = (".jsonl", ".gz", ".json")


@dataclass(slots=True)
class Round:
    """One round as the reader keeps it (seconds since the epoch; None: not recorded)."""

    session_id: str
    index: int
    line: int
    provider: str
    model: str | None
    input_tokens: int
    prefix_tokens: int
    output_tokens: int
    request_s: float | None
    end_s: float | None
    user_message: bool
    tool_s: float  # effective latency of the tools this round called (internal, else wall)


def read(source: str | Path, *, block_size: int = BLOCK_SIZE,
         providers: str | list[str] | None = None, models: str | list[str] | None = None,
         skip_bad: bool = False, **options: Any) -> Trace:
    """Read a TraceLab round file (``.jsonl`` or ``.jsonl.gz``) or a folder of them."""
    reject_unknown(options, "tracelab")
    check_block_size(block_size)
    keep_p, keep_m = _names(providers, "providers"), _names(models, "models")
    path = Path(source)

    def one(file: Path) -> list[Session]:
        return build_sessions(rounds(file), str(file), block_size, keep_p, keep_m)

    per_file, skipped = read_files(path, SUFFIXES, one, skip_bad=skip_bad)
    sessions = [s for ss in per_file for s in ss]
    if not sessions:
        raise InputError("no session of the providers and models asked for",
                         source=str(path), field="providers" if keep_p else "models")
    trace = Trace(sessions, name=path.name.split(".")[0], skipped=skipped)
    trace.validate()
    return trace


def _names(v: Any, field: str) -> frozenset[str] | None:
    if v is None:
        return None
    names = [v] if isinstance(v, str) else v
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise InputError(f"expected a name or a list of names, got {v!r}", field=field)
    return frozenset(names)


# ------------------------------------------------------------------ rows

def rounds(path: Path) -> Iterator[Round]:
    """Every round of ``path`` (plain or gzipped) in file order; a bad line is one error
    naming it."""
    for n, rec in iter_jsonl(path, opener=open_lines, max_line=MAX_LINE):
        try:
            yield parse_round(rec, n)
        except InputError as e:
            raise e.located(source=str(path), where=f"line {n}") from None


def parse_round(rec: dict[str, Any], line: int) -> Round:
    sid, provider = rec.get("session_id"), rec.get("provider")
    if not isinstance(sid, str) or not sid:
        raise InputError(f"expected a session id, got {sid!r}", field="session_id")
    if not isinstance(provider, str) or not provider:
        raise InputError(f"expected a provider name, got {provider!r}", field="provider")
    model = rec.get("model")
    if model is not None and not isinstance(model, str):
        raise InputError(f"expected a model name, got {model!r}", field="model")
    inp = req_tokens(rec, "input_tokens_total")
    # Codex clamps newly_append at 0, so a cached count may pass the input total
    prefix = min(req_tokens(rec, "prefix_tokens"), inp)
    events = rec.get("timing_events") or []
    if not isinstance(events, list):
        raise InputError("expected a list", field="timing_events")
    ins: list[float] = []
    outs: list[float] = []
    other: list[float] = []
    user = False
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise InputError("expected an object", field=f"timing_events[{i}]")
        kind = ev.get("event_type")
        if kind is not None and not isinstance(kind, str):  # a list was a TypeError
            raise InputError(f"expected an event name, got {kind!r}",
                             field=f"timing_events[{i}].event_type")
        ts = _time(ev.get("timestamp"), f"timing_events[{i}].timestamp")
        if ts is None:
            continue
        (ins if kind in INPUTS else outs if kind in OUTPUTS else other).append(ts)
        user = user or kind == "user_message"
    first_out = min(outs) if outs else None
    before = [t for t in ins if first_out is None or t <= first_out]
    request = max(before) if before else None
    end = max(outs) if outs else (max(other) if other else request)
    return Round(sid, _index(rec), line, provider, model, inp, prefix,
                 req_tokens(rec, "output_tokens"), request, end, user, _tool_s(rec))


def _index(rec: dict[str, Any]) -> int:
    v = rec.get("round_index")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InputError(f"expected a non-negative integer, got {v!r}", field="round_index")
    return v


def _time(v: Any, field: str) -> float | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise InputError(f"expected an ISO-8601 time, got {v!r}", field=field)
    try:
        t = dt.datetime.fromisoformat(v)
    except ValueError:
        raise InputError(f"expected an ISO-8601 time, got {v[:40]!r}", field=field) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def _tool_s(rec: dict[str, Any]) -> float:
    """Seconds of the round's tool calls: the runner's own latency when it gave one, else
    result minus emission (as TraceLab's analyses count them)."""
    tools = rec.get("tools") or []
    if not isinstance(tools, list):
        raise InputError("expected a list", field="tools")
    total = 0.0
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InputError("expected an object", field=f"tools[{i}]")
        for key in ("tool_internal_latency_ms", "tool_wall_latency_ms"):
            v = tool.get(key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e12:
                raise InputError(f"expected milliseconds, got {v!r}", field=f"tools[{i}].{key}")
            total += v / 1000.0
            break
    return total


# ------------------------------------------------------------------ sessions

def group(rows: Iterator[Round], providers: frozenset[str] | None = None,
          models: frozenset[str] | None = None) -> dict[str, list[Round]]:
    """Rounds by session (first-seen order), each in round order, filtered."""
    by: dict[str, list[Round]] = {}
    for r in rows:
        if providers is None or r.provider in providers:
            by.setdefault(r.session_id, []).append(r)
    out: dict[str, list[Round]] = {}
    for sid, rs in by.items():
        rs.sort(key=lambda r: (r.index, r.line))
        if models is None or session_model(rs) in models:
            out[sid] = rs
    return out


def session_model(rs: list[Round]) -> str | None:
    """The model most of the session's rounds named."""
    names = [r.model for r in rs if r.model]
    return max(set(names), key=lambda m: (names.count(m), m)) if names else None


def build_sessions(rows: Iterator[Round], source: str, block_size: int,
                   providers: frozenset[str] | None = None,
                   models: frozenset[str] | None = None) -> list[Session]:
    by = group(rows, providers, models)
    if not by and providers is None and models is None:
        raise InputError("no rounds", source=source)
    times = {sid: _times(rs) for sid, rs in by.items()}
    t0 = min((sent[0] for sent, _ in times.values()), default=0.0)
    ids = _Ids(block_size)
    out: list[Session] = []
    for sid, rs in by.items():
        model = session_model(rs)
        sent, ended = times[sid]
        s = Session(session_id=sid, parent_id=None, relation="root", parent_turn=None,
                    join_turn=None, model=model, source=f"{source}#tracelab", scope=source,
                    start_s=sent[0] - t0)
        hashes = ids.session(rs, (rs[0].provider, model))
        for k, r in enumerate(rs):
            s.turns.append(Turn(
                turn=k, t=sent[k] - sent[0],
                think_s=max(0.0, sent[k] - ended[k - 1]) if k else 0.0,
                api_s=max(0.0, ended[k] - sent[k]), input_tokens=r.input_tokens,
                output_tokens=r.output_tokens, hash_ids=hashes[k], block_size=block_size,
                cached_tokens=r.prefix_tokens))
        out.append(s)
    return out


def _times(rs: list[Round]) -> tuple[list[float], list[float]]:
    """Each round's request and end time, never going back: a round without input events
    is sent when the one before it ended."""
    known = [t for r in rs for t in (r.request_s, r.end_s) if t is not None]
    sent: list[float] = []
    ended: list[float] = []
    for r in rs:
        a = r.request_s if r.request_s is not None else ended[-1] if ended else \
            r.end_s if r.end_s is not None else min(known, default=0.0)
        a = max(a, sent[-1]) if sent else a
        sent.append(a)
        ended.append(max(a, r.end_s) if r.end_s is not None else a)
    return sent, ended


class _Ids:
    """Block ids of one file's sessions (one hash scope): fresh ids from one counter, the
    first blocks of every provider-and-model's sessions from one shared run."""

    def __init__(self, block_size: int) -> None:
        self.b = block_size
        self.next = 1
        self.shared: dict[tuple[str, str | None], np.ndarray] = {}

    def fresh(self, n: int) -> np.ndarray:
        out = np.arange(self.next, self.next + n, dtype=np.int64)
        self.next += n
        return out

    def session(self, rs: list[Round], key: tuple[str, str | None]) -> list[np.ndarray]:
        """Each round's ids: its first ``prefix`` tokens' whole blocks are the round
        before's (the first round's, the shared run's), then fresh ids up to the blocks
        the next round shares; tokens past them are a unique tail. The ids live in one
        growing buffer, so a session costs its blocks, not its turns x blocks."""
        b = self.b
        own = [r.input_tokens // b for r in rs]  # whole blocks of each prompt
        share = [min(r.prefix_tokens // b, own[k - 1]) if k else r.prefix_tokens // b
                 for k, r in enumerate(rs)]
        need = [max(share[k], min(own[k], share[k + 1] if k + 1 < len(rs) else 0))
                for k in range(len(rs))]
        run = self.shared.get(key, np.zeros(0, dtype=np.int64))
        if share[0] > len(run):
            run = np.concatenate([run, self.fresh(share[0] - len(run))])
            self.shared[key] = run
        buf = np.empty(max(16, 2 * need[0]), dtype=np.int64)
        buf[:share[0]] = run[:share[0]]
        out: list[np.ndarray] = []
        for k in range(len(rs)):
            q = share[k]
            # a new buffer when this round diverges inside the ids the round before holds
            # (they must stay), or outgrows the buffer
            if (k and q < need[k - 1]) or need[k] > len(buf):
                old, buf = buf, np.empty(max(16, 2 * need[k]), dtype=np.int64)
                buf[:q] = old[:q]
            buf[q:need[k]] = self.fresh(need[k] - q)
            out.append(buf[:need[k]])
        return out


# ------------------------------------------------------------------ facts

def trace_files(trace: Trace) -> list[Path] | None:
    """The TraceLab files ``trace`` was read from, or None when it is not TraceLab's."""
    srcs = [s.source for s in trace.sessions]
    if not srcs or not all(src.endswith("#tracelab") for src in srcs):
        return None
    return [Path(f) for f in dict.fromkeys(src.removesuffix("#tracelab") for src in srcs)]


def facts(files: list[Path], sessions: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """Per provider, over ``sessions`` (None: all) of ``files``: sessions, rounds, rounds
    per session, input and output tokens, prefix share, think (between rounds of a task),
    human-wait (before a user's message) and tool times (``traces stats``)."""
    from agentbench.traces.stats import _pcts

    by: dict[str, list[Round]] = {}
    for f in files:
        for sid, rs in group(rounds(f)).items():
            if sessions is None or sid in sessions:
                by[sid] = rs
    out: dict[str, dict[str, Any]] = {}
    for provider in sorted({rs[0].provider for rs in by.values()}):
        ss = [rs for rs in by.values() if rs[0].provider == provider]
        flat = [r for rs in ss for r in rs]
        think: list[float] = []
        wait: list[float] = []
        for rs in ss:
            sent, ended = _times(rs)
            for k in range(1, len(rs)):
                (wait if rs[k].user_message else think).append(max(0.0, sent[k] - ended[k - 1]))
        inp = sum(r.input_tokens for r in flat)
        out[provider] = {
            "sessions": len(ss), "rounds": len(flat),
            "rounds_per_session": _pcts([len(rs) for rs in ss]),
            "input_tokens": _pcts([r.input_tokens for r in flat]),
            "output_tokens": _pcts([r.output_tokens for r in flat]),
            "prefix_share": sum(r.prefix_tokens for r in flat) / inp if inp else None,
            "input_output_ratio": inp / max(1, sum(r.output_tokens for r in flat)),
            "think_s": _pcts(think), "human_wait_s": _pcts(wait),
            "tool_s": _pcts([r.tool_s for r in flat if r.tool_s > 0]),
            "models": sorted({m for rs in ss if (m := session_model(rs))}),
        }
    return out


def format_facts(fx: dict[str, dict[str, Any]]) -> str:
    """The per-provider figures as ``traces stats`` prints them."""
    def dist(d: dict[str, float | None], unit: str = "", digits: int = 0) -> str:
        if d["p50"] is None:
            return "-"
        return "  ".join(f"{k} {d[k]:,.{digits}f}{unit}" for k in ("p50", "p90", "p99", "mean"))

    lines = ["", "TraceLab, per provider (think: between a task's rounds; human wait: before a "
             "user's message; tool: the runner's latency, else wall)"]
    for provider, f in fx.items():
        share = "-" if f["prefix_share"] is None else f"{100 * f['prefix_share']:.1f}%"
        lines += [f"{provider}: {f['sessions']:,} sessions, {f['rounds']:,} rounds, prefix "
                  f"share {share}, input:output {f['input_output_ratio']:,.1f}:1, models "
                  f"{', '.join(f['models']) or '-'}",
                  f"  rounds/session {dist(f['rounds_per_session'], digits=1)}",
                  f"  input tokens   {dist(f['input_tokens'])}",
                  f"  output tokens  {dist(f['output_tokens'])}",
                  f"  think          {dist(f['think_s'], ' s', 1)}",
                  f"  human wait     {dist(f['human_wait_s'], ' s', 1)}",
                  f"  tool           {dist(f['tool_s'], ' s', 1)}"]
    return "\n".join(lines)
