"""``agentbench record``: a pass-through proxy that records a live agent's LLM traffic into a
native trace (sessions, subagents, think times, hash ids; no text unless asked).

- :mod:`agentbench.proxy.proxy`: the aiohttp proxy;
- :mod:`agentbench.proxy.recorder`: the recorder behind it (relayed calls into the journal
  and the trace file);
- :mod:`agentbench.proxy.upstream`: where a request goes upstream, and how the URL shows;
- :mod:`agentbench.proxy.calls`: one call's counts, hash ids and digests;
- :mod:`agentbench.proxy.reply`: what a response said, read with bounded memory;
- :mod:`agentbench.proxy.replybody`: the record of it, and a non-streamed body read into one;
- :mod:`agentbench.proxy.sessionize`: calls into sessions and subagents (pure);
- :mod:`agentbench.proxy.store`: the journal and the native file.
"""

from __future__ import annotations

from agentbench.proxy.proxy import ProxyHandle, RecordConfig, serve, start_proxy
from agentbench.proxy.store import rebuild

__all__ = ["ProxyHandle", "RecordConfig", "rebuild", "serve", "start_proxy"]
