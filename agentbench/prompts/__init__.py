"""Prompts from hash ids: the block layout shared by the text builder (HTTP) and the
block-hash builder (the in-process simulator), body templates and vocabularies; the words
they are made of are ``agentbench.traces.words`` (docs/architecture.md#replay)."""
