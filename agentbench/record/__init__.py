"""``agentbench record``: a pass-through proxy that records a live agent's LLM traffic into a
native trace (sessions, subagents, think times, hash ids; no text unless asked).

- :mod:`agentbench.record.proxy`: the aiohttp proxy and the recorder behind it;
- :mod:`agentbench.record.calls`: one call's counts, hash ids and digests;
- :mod:`agentbench.record.sessionize`: calls into sessions and subagents (pure);
- :mod:`agentbench.record.store`: the journal and the native file.
"""

from __future__ import annotations

from agentbench.record.proxy import ProxyHandle, RecordConfig, serve, start_proxy
from agentbench.record.store import rebuild

__all__ = ["ProxyHandle", "RecordConfig", "rebuild", "serve", "start_proxy"]
