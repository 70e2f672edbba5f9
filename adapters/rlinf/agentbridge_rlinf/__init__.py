"""RLinf backend for agentbridge: RLinf 0.3.0 reasoning jobs whose agent loop is agentbridge's rollout driver."""

__version__ = "0.1.0"
RLINF_PIN = "0.3.0"
