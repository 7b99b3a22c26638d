"""ShareGPT-shaped conversations (the Codex SWE-bench Pro traces):
``[{"conversations": [{"from": "human"|"gpt"|..., "value": text}, ...]}, ...]`` as a JSON
array or JSONL (``role``/``content`` keys are read too).

Each model reply (``gpt`` / ``assistant``) is one turn: its input is every message before
it under the chat template of ``_text`` (tokens by the approximate tokenizer, or exactly
with ``tokenizer=`` a ``tokenizer.json`` path or hub id), its hash ids are prefix-chained
block hashes of those tokens (``block_size``, default 64), its output the reply's tokens.
Text has no timing: think time is drawn, with ``seed`` (default 0), from the log-normal
fit of the published Codex inter-call delay (``_text.codex_delay_fit``), and turn ``t``
adds the draws (response time unknown, taken as 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from agentbench.errors import InputError
from agentbench.traces.model import Session, Trace, Turn
from agentbench.traces.readers import read_files
from agentbench.traces.readers._fields import check_block_size, check_seed
from agentbench.traces.readers._text import (
    DEFAULT_BLOCK_SIZE,
    SHAREGPT_ROLES,
    PromptHasher,
    draw_think_times,
    iter_file_records,
    message_token_ids,
    primer_ids,
    reject_unknown,
)
from agentbench.traces.tokenizers import get_tokenizer


def read(source: str | Path, *, tokenizer: str | None = None, seed: int = 0,
         block_size: int = DEFAULT_BLOCK_SIZE, skip_bad: bool = False,
         **options: Any) -> Trace:
    """Read a ShareGPT ``.json`` / ``.jsonl`` file or a folder of them."""
    path = Path(source)
    b = _Builder(str(path), tokenizer, seed, block_size, options)

    def one(f: Path) -> list[Session]:
        return b.add(((str(f), where, rec) for where, rec in iter_file_records(f)))

    per_file, skipped = read_files(path, (".json", ".jsonl"), one, skip_bad=skip_bad)
    trace = Trace([s for ss in per_file for s in ss], name=path.stem, skipped=skipped)
    trace.validate()
    return trace


def read_records(records: Iterable[dict[str, Any]], *, source: str, **options: Any) -> Trace:
    """Read already-decoded records (e.g. Hugging Face dataset rows)."""
    rows = ((source, f"record {i}", rec) for i, rec in enumerate(records))
    return build(rows, name=Path(source).name or source, scope=source, **options)


def build(records: Iterable[tuple[str, str, dict[str, Any]]], *, name: str, scope: str,
          tokenizer: str | None = None, seed: int = 0,
          block_size: int = DEFAULT_BLOCK_SIZE, **options: Any) -> Trace:
    """Sessions from (file, where, record) triples; one hash scope for all of them."""
    trace = Trace(_Builder(scope, tokenizer, seed, block_size, options).add(records),
                  name=name)
    trace.validate()
    return trace


class _Builder:
    """Sessions of successive groups of records (a folder's files) in one hash scope, with
    one stream of think-time draws; a group that fails leaves no trace in either."""

    def __init__(self, scope: str, tokenizer: str | None, seed: int, block_size: int,
                 options: dict[str, Any]) -> None:
        reject_unknown(options, "sharegpt")
        self.block_size = check_block_size(block_size)
        self.scope = scope
        self.tok = get_tokenizer(tokenizer)
        self.rng = np.random.default_rng(check_seed(seed))
        self.seen: set[str] = set()
        self.count = 0

    def add(self, records: Iterable[tuple[str, str, dict[str, Any]]]) -> list[Session]:
        state = self.rng.bit_generator.state
        seen = set(self.seen)
        out: list[Session] = []
        try:
            for file, where, rec in records:
                try:
                    s = _session(rec, file, where, self.scope, self.tok, self.block_size,
                                 self.rng, self.count + len(out))
                except InputError as e:
                    raise e.located(source=file, where=where) from None
                if s is None:
                    continue
                base, k = s.session_id, 1
                while s.session_id in seen:
                    k += 1
                    s.session_id = f"{base}~{k}"
                seen.add(s.session_id)
                out.append(s)
        except BaseException:
            self.rng.bit_generator.state = state
            raise
        self.seen = seen
        self.count += len(out)
        return out


def _messages(rec: dict[str, Any]) -> list[tuple[str, str]]:
    key = "conversations" if "conversations" in rec else "messages"
    conv = rec.get(key)
    if conv is None:
        raise InputError("missing", field="conversations")
    if not isinstance(conv, list):
        raise InputError(f"expected a list of messages, got {type(conv).__name__}", field=key)
    out = []
    for j, m in enumerate(conv):
        if not isinstance(m, dict):
            raise InputError("expected an object", field=f"{key}[{j}]")
        speaker = m.get("from", m.get("role"))
        text = m.get("value", m.get("content"))
        if not isinstance(speaker, str):
            raise InputError("missing or not a string", field=f"{key}[{j}].from")
        if not isinstance(text, str):
            raise InputError("missing or not a string", field=f"{key}[{j}].value")
        out.append((SHAREGPT_ROLES.get(speaker.lower(), speaker.lower()), text))
    return out


def _session(rec: dict[str, Any], file: str, where: str, scope: str, tok: Any,
             block_size: int, rng: np.random.Generator, index: int) -> Session | None:
    messages = _messages(rec)
    hasher = PromptHasher(block_size)
    history: list[np.ndarray] = []  # token ids of each message so far
    primer = np.asarray(primer_ids(), dtype=np.int64)
    turns: list[Turn] = []
    for role, text in messages:
        ids = tok.encode(text)
        if role == "assistant":
            prompt = np.concatenate([*history, primer])
            turns.append(Turn(
                turn=len(turns), t=0.0, think_s=0.0, api_s=None, input_tokens=len(prompt),
                output_tokens=len(ids), hash_ids=hasher.hash_ids(prompt),
                block_size=block_size,
            ))
        history.append(np.asarray(message_token_ids(ids, role), dtype=np.int64))
    if not turns:
        return None
    think = draw_think_times(rng, len(turns) - 1)
    t = 0.0
    for turn, gap in zip(turns[1:], think, strict=True):
        t += float(gap)
        turn.think_s = float(gap)
        turn.t = t
    sid = rec.get("id")
    return Session(
        session_id=str(sid) if sid not in (None, "") else f"{Path(file).stem}#{index}",
        parent_id=None, relation="root", parent_turn=None, join_turn=None,
        model=rec.get("model") if isinstance(rec.get("model"), str) else None,
        source=f"{file}#sharegpt", scope=scope, start_s=0.0, turns=turns,
    )
