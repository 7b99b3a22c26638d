"""The recorder behind the recording proxy, and what ``agentbench record`` was asked for
(:class:`RecordConfig`): each relayed call is analysed off the request's path (counts, hash
ids, digests), appended to the journal, and the native trace file is kept current while
calls come and written once more at close."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench.errors import ResultsWriteError, os_reason
from agentbench.proxy import store
from agentbench.proxy.calls import Analyzer, Call
from agentbench.proxy.upstream import Upstream
from agentbench.transport.http import redact


@dataclass
class RecordConfig:
    """What ``agentbench record`` was asked for."""

    upstream: str
    out: Path
    host: str = "127.0.0.1"
    port: int = 8080
    keep_text: bool = False
    block_size: int = 64
    tokenizer: str | None = None
    subagents: str = "infer"
    session_header: str = "X-Session-ID"
    parent_header: str = "X-Parent-Session-ID"
    session_from_user: bool = True
    write_interval_s: float = 1.0


class Recorder:
    """Turns relayed calls into journal lines and keeps the native trace file current
    (rewritten at most every ``write_interval_s``, or 10x the last rewrite's time when
    that is longer, while calls come, and at close)."""

    def __init__(self, cfg: RecordConfig, t0_ns: int) -> None:
        self.cfg = cfg
        self.t0_ns = t0_ns
        self.analyzer = Analyzer(block_size=cfg.block_size, tokenizer=cfg.tokenizer,
                                 keep_text=cfg.keep_text)
        self.meta = store.describe(
            upstream=Upstream.parse(cfg.upstream).shown, keep_text=cfg.keep_text,
            block_size=cfg.block_size, tokenizer=cfg.tokenizer, subagents=cfg.subagents,
            session_header=cfg.session_header, session_from_user=cfg.session_from_user,
            started_unix_s=time.time())
        self.journal = store.Journal(store.journal_path(cfg.out), self.meta)
        self.calls: list[Call] = []
        self.ids = itertools.count()
        self.on_call: Callable[[Call], None] | None = None
        self.write_error: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Future[Any] | None = None
        self._dirty = False
        self._interval_s = cfg.write_interval_s
        self._write_started = 0.0
        self._pending: set[asyncio.Task[None]] = set()

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self.t0_ns

    def submit(self, **raw: Any) -> None:
        """Record one relayed call, off the request's path (a task of its own)."""
        task = asyncio.get_running_loop().create_task(self._record(raw))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _record(self, raw: dict[str, Any]) -> None:
        user = self.cfg.session_from_user and raw["session_key"] is None
        headers = raw.pop("headers", None) or {}
        try:
            call = self.analyzer.call(**raw)
        except Exception as e:  # a call we cannot read is skipped, never the relay
            print(f"agentbench record: call {raw['index']} not recorded: {e!r}",
                  file=sys.stderr)
            return
        if call.stream_error:  # an error event may quote the request: its keys never stored
            call.stream_error = redact(call.stream_error,
                                       _secrets(self.cfg.upstream, headers), cut=True)
        if user and call.session_key is None:
            call.session_key = _user_of(raw["body_bytes"])
        store.text_safe(call)
        if (why := store.problem(call)) is not None:
            print(f"agentbench record: call {call.index} left out of the trace (kept in the "
                  f"journal): {why}", file=sys.stderr)
        self.calls.append(call)
        journal = self.journal
        failed = journal.failed
        journal.append(call)
        if failed is None and journal.failed is not None:  # said once: the relay goes on
            print(f"agentbench record: cannot write the journal {journal.path} "
                  f"({os_reason(journal.failed)}): calls are still relayed and kept for the "
                  f"trace, but a crash now loses them past the first {journal.calls}",
                  file=sys.stderr)
        self._changed()
        if self.on_call is not None:
            self.on_call(call)

    def _changed(self) -> None:
        self._dirty = True
        if self._timer is None and self._writing is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval_s,
                                                                 self._write_now)

    def _write_now(self) -> None:
        self._timer = None
        self._dirty = False
        self._write_started = time.perf_counter()
        snapshot = list(self.calls)
        self._writing = asyncio.ensure_future(
            asyncio.to_thread(store.write, snapshot, self.cfg.out, self.meta))
        self._writing.add_done_callback(self._wrote)

    def _wrote(self, fut: asyncio.Future[Any]) -> None:
        self._writing = None
        # a long recording takes longer to rewrite: keep rewriting to <= 10% of the time
        took = time.perf_counter() - self._write_started
        self._interval_s = max(self.cfg.write_interval_s, 10 * took)
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None:
            if self.write_error is None:  # once, not at every try while the disk is full
                print(f"agentbench record: could not write {self.cfg.out} "
                      f"({os_reason(exc)}); trying again as calls come", file=sys.stderr)
            self.write_error = exc
        elif not fut.cancelled():
            self.write_error = None
        if self._dirty:
            self._changed()

    async def settle(self) -> None:
        """Wait until every relayed call is in the journal (tests, shutdown)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def close(self) -> None:
        """Record what is pending, then write the trace one last time."""
        await self.settle()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing is not None:
            with contextlib.suppress(Exception):
                await self._writing
        journal = self.journal
        journal.close()
        try:
            store.write(list(self.calls), self.cfg.out, self.meta)
        except OSError as e:  # a full disk: one line, with what is left to rebuild from
            n = len(self.calls)
            err = ResultsWriteError(str(self.cfg.out), os_reason(e))
            held = f"{journal.calls} of the {n} calls" if journal.failed else f"all {n} calls"
            err.hint = (f"its journal {journal.path} holds {held}: free space, then "
                        f"`agentbench record -o {shlex.quote(str(self.cfg.out))} --rebuild`")
            raise err from None


def _secrets(upstream: str, headers: dict[str, str]) -> tuple[str, ...]:
    """What an upstream's error may quote and the recording never stores
    (docs/record.md): the upstream URL's ``user:password`` (as sent, ``Authorization:
    Basic``) and query values, and the values of the request's ``headers`` (its
    secret-looking ones: Authorization, ``x-api-key``, cookies), in the forms
    ``secrets_of`` knows for a scenario's endpoint."""
    from types import SimpleNamespace

    from agentbench.scenario.secrets import secrets_of

    return secrets_of(SimpleNamespace(url=upstream, headers=headers))


def _user_of(body: bytes) -> str | None:
    import json

    try:
        user = json.loads(body).get("user")
    except (ValueError, AttributeError, RecursionError):
        return None
    return user if isinstance(user, str) and user else None
