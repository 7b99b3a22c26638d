"""Results on disk: the row schema, spool and journal, writer, run folder and reader
(docs/architecture.md)."""
