"""How a request reaches an engine, below the replay's agent semantics.

``agentbench.replay`` decides what each agent sends and when (lanes, trees, timing); a
transport (``base.Transport``) carries one request to an engine and stamps what came back
into the request's record:

- ``openai_http`` (over ``http``, ``stream`` and its timer ``streamtimer``, ``sse``): any
  OpenAI-compatible server, on the wall clock (the record keeps the raw stream; ``finish``
  reads it into the row afterwards);
- ``simulated``: the embedded serving simulator in the same process, on the virtual clock
  (``agentbench.replay.clock``), with prompts as prefix-chained block hashes
  (``agentbench.prompts.segments``) instead of text.

``opener.open_transport`` opens an endpoint of the scenario as one of them, the only place
that asks which kind it is; the replay (``agentbench.replay.endpoints``) hands each request
to its endpoint's transport and never needs to know which one (docs/architecture.md).
"""
