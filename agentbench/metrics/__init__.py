"""Metrics: pure functions over the stored records of a run (docs/metrics.md). Nothing here
talks to the network; everything can be rebuilt from ``results/<run>/`` alone."""

from __future__ import annotations

from agentbench.metrics.format import format_summary
from agentbench.metrics.summary import summarize, summarize_records
from agentbench.results.reader import RunRecords, read_records

__all__ = ["RunRecords", "format_summary", "read_records", "summarize", "summarize_records"]
