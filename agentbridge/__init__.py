"""agentbridge: one agent spec, any RL backend."""

__version__ = "0.1.0"
