"""Use ``agentbridge_mini`` from this source tree; when it is not pip-installed, register its plugin in this
process only (what its entry point does once installed)."""

import importlib.metadata as md
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    md.distribution("agentbridge-mini")
except md.PackageNotFoundError:
    from agentbridge.plugins import get_plugins
    from agentbridge_mini import __version__, plugin

    get_plugins().register("mini", plugin, ("agentbridge-mini (source tree)", __version__))
