"""TRL backend for agentbridge: GRPO jobs whose rollouts run agentbridge's driver inside TRL."""

__version__ = "0.1.0"
