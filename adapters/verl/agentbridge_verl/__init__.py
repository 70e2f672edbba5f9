"""veRL backend for agentbridge: veRL 0.9.1 jobs whose agent loop is agentbridge's rollout driver."""

__version__ = "0.1.0"
VERL_PIN = "0.9.1"
