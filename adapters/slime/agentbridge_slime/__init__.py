"""slime backend for agentbridge: slime jobs whose per-sample generate function is agentbridge's rollout driver.

slime is not on the package index: the adapter was verified against the upstream commit below, read from its public
repository (README.md says what ran there).
"""

__version__ = "0.1.0"
SLIME_REPO = "THUDM/slime"
SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"  # 2026-08-21, after tag v0.3.1
SLIME_VERSION = "0.3.1"  # what that commit's setup.py says
SLIME_PIN = f"{SLIME_REPO}@{SLIME_COMMIT[:7]}"
