"""agentbridge-mini: an example third-party agentbridge backend."""

__version__ = "0.1.0"
