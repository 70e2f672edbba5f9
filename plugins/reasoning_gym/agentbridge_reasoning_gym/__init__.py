"""reasoning-gym's tasks as agentbridge datasets, an answer environment with a scripted expert, and a reward that
is reasoning-gym's own verifier."""
