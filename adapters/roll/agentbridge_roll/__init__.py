"""ROLL backend for agentbridge: ROLL agentic-pipeline jobs whose env manager runs agentbridge's rollout driver."""

__version__ = "0.1.0"
# ROLL is not on the package index: the adapter is verified against this commit of GitHub alibaba/ROLL (its
# setup.py says 0.3.0), read from source (see README.md)
ROLL_REPO = "alibaba/ROLL"
ROLL_COMMIT = "8eb27cc2dc34c4d1310b169d9b86d339004d811a"
ROLL_SOURCE = f"GitHub {ROLL_REPO} @ {ROLL_COMMIT[:7]}"


def keep_roll_logs_out_of_cwd() -> None:
    """ROLL's logger opens a file under ``$ROLL_LOG_DIR`` (default ``./output/logs``: the working directory) when
    ROLL is first imported; checks and conformance runs point it at the temporary directory unless it is set."""
    import os
    import tempfile

    os.environ.setdefault("ROLL_LOG_DIR", os.path.join(tempfile.gettempdir(), "agentbridge-roll-logs"))
