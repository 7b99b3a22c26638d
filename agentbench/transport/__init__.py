"""How a request reaches an engine, below the replay's agent semantics.

``agentbench.replay`` decides what each agent sends and when (lanes, trees, timing, prompt
layout); a transport carries one request to an engine and stamps what came back into the
request's record:

- ``http`` + ``sse``: any OpenAI-compatible server, on the wall clock (the record keeps the
  raw stream; ``sse`` reads it afterwards);
- ``simulated``: the embedded serving simulator in the same process, on the virtual clock
  (``agentbench.replay.clock``), with prompts as prefix-chained block hashes
  (``segments``, which encodes the replay's prompt layout, ``agentbench.prompts.layout``)
  instead of text.

The replay opens endpoints (``agentbench.replay.endpoints``) and hands each request to its
endpoint's transport; it never needs to know which one.
"""
