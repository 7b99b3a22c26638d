"""Reports: format finished summaries as HTML and Markdown, compare runs, and gate a
candidate against a baseline. Nothing here recomputes a metric of a summary."""
