"""The scenario: its model, YAML loading, flags, rules, secrets and fingerprint
(docs/architecture.md). ``from agentbench.scenario import Scenario`` is the model."""

from agentbench.scenario.model import Scenario

__all__ = ["Scenario"]
