"""How a request reaches an engine, below the replay's agent semantics.

``agentbench.replay`` decides what each agent sends and when (lanes, trees, timing, prompt
layout); a transport carries one request to an engine and stamps what came back into the
request's record:

- HTTP (``agentbench.replay.client`` + ``sse``): any OpenAI-compatible server, on the wall
  clock;
- ``simulated``: the embedded serving simulator in the same process, on the virtual clock
  (``agentbench.replay.clock``), with prompts as prefix-chained block hashes
  (``segments``) instead of text.
"""
