"""The scenario: its model, YAML loading, flags, rules, secrets and fingerprint
(docs/architecture.md)."""
