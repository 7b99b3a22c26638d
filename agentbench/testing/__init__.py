"""Test and benchmark fixtures, not part of the product: the product code (everything else
under ``agentbench``) never imports this package.

Modules: ``fakeserver`` (an aiohttp OpenAI-compatible streaming server with set TTFT/ITL
and faults on demand), ``fastserver`` (a lean bare-asyncio SSE server for fidelity tests
and client benchmarks; ``python -m agentbench.testing.fastserver``), ``demo`` (a synthetic
results folder in replay's on-disk layout, for tests, docs and the metrics benchmark).
"""
