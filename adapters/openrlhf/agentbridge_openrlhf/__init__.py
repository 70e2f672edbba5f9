"""OpenRLHF backend for agentbridge."""

__version__ = "0.1.0"
