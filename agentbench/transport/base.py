"""The transport seam: what the replay needs from any way of reaching an engine.

An endpoint of the scenario becomes one :class:`Transport` when the run opens it
(``agentbench.transport.opener.open_transport``, the only place that asks which kind of
endpoint it is). The replay builds each turn's prompt with the transport's own builder,
hands the request to ``send`` and never asks which transport it has. Adding a kind of
endpoint is one new implementation and one branch of the opener
(docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from agentbench.results.samples import SampleBlock
from agentbench.results.schema import RequestRecord
from agentbench.traces.model import Turn

#: server-metrics rows of one collection at a run time, as rows or (the in-process
#: simulator's) as a block of columns (None: the endpoint has none)
Rows = list[dict[str, Any]] | SampleBlock
Collector = Callable[[int], Awaitable[Rows | None]]
#: what makes two transports build the same prompts: (api, template tokens, block size)
Flavor = tuple[str, int, int | None]


class PromptBuilder(Protocol):
    """Turns of one session, in the form its transport sends."""

    def build(self, turn: Turn, next_turn: Turn | None) -> Any: ...


class Transport(Protocol):
    """One endpoint while the run goes: how a request reaches its engine.

    ``send`` stamps what came back into the record (``sent_ns`` ... ``end_ns``, the raw
    stream or what it said, status and error) and never raises for a failed request:
    failures are data. A cancellation is recorded and re-raised."""

    label: str
    api: str  # "chat" | "completions"
    ignore_eos: bool
    overhead: int  # prompt tokens the server adds (chat template, BOS): cut from content
    notes: list[str]

    @property
    def flavor(self) -> Flavor:
        """Transports of one flavor take the same prompt for a turn."""
        ...

    def prompt_builder(self, caches: Mapping[str, Any], salt: int, session_id: str,
                       shared_prefix: int, turns: Sequence[Turn] = ()) -> PromptBuilder:
        """A session's prompt builder; ``turns``: the session's turns, which a builder
        may read ahead of the turn it builds."""
        ...

    async def send(self, rec: RequestRecord, prompt: Any, max_tokens: int, session: str,
                   t0_ns: int) -> None: ...

    def collector(self) -> Collector | None:
        """Server metrics as rows (Prometheus samples), or None when there are none."""
        ...

    async def stream_rate(self, cache: Any) -> float | None:
        """Token events per second of one short stream (``--workers auto``); None when it
        cannot tell (no sockets to read, too few events)."""
        ...

    async def reset_cache(self) -> str:
        """Drop the engine's cached prefix blocks (``cold_stages``); what it answered, one
        line. Raises ``InputError`` when the engine refused (a stage that cannot start cold
        is not run)."""
        ...

    def opened(self) -> dict[str, Any]:
        """What opening found out (probes, calibration), for ``reopen_transport`` in a
        worker process."""
        ...

    def hold_unsent(self, stopped: Callable[[], bool]) -> None:
        """A request that waited in the client for a free connection is not sent once
        ``stopped()`` says so (its stage ended meanwhile): it is recorded as cancelled,
        never sent. A transport with no such wait ignores it."""
        ...

    async def close(self) -> None: ...
