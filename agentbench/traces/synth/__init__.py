"""Calibrated synthetic agentic traces: ``synthesize("agentx", sessions=100, seed=0)``.

Profiles (``profiles/*.yaml``) hold every parameter with its source; ``calibrate``
re-derives the ones solved against published figures.
"""

from agentbench.traces.synth.generator import check_sessions, synthesize
from agentbench.traces.synth.profile import Profile, load_profile, profile_names

__all__ = ["Profile", "check_sessions", "load_profile", "profile_names", "synthesize"]
