"""Prompt content from hash ids: synthetic words, vocabularies, and the block layout
shared by the text and block-hash builders (docs/architecture.md)."""
