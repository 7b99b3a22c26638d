"""``python -m agentbench.cli``."""

from agentbench.cli import main

main()
