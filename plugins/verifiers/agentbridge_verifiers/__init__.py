"""verifiers (0.4.0, Prime Intellect's Environments Hub format) environments for agentbridge: verifiers runs each
episode in its own venv (``server.py``), agentbridge's driver generates every model turn."""
