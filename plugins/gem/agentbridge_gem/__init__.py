"""GEM environments as agentbridge environments, run in GEM's own venv (``.venv-gem``) over JSON lines (no ``gem``
import here)."""
