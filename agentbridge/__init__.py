"""agentbridge: one agent spec, any RL backend.

What plugin authors write against is importable from here::

    from agentbridge import hookimpl, tool, Environment, ToolEnvironment, Task, StepResult, Message
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it (imported on first use: `import agentbridge` stays light)
_PUBLIC = {
    "hookimpl": "agentbridge.hooks",
    "tool": "agentbridge.tools",
    "ToolEnvironment": "agentbridge.tools",
    "ToolSpec": "agentbridge.tools",
    "Environment": "agentbridge.env",
    "Task": "agentbridge.env",
    "StepResult": "agentbridge.env",
    "Message": "agentbridge.env",
    "Trajectory": "agentbridge.rollout.trajectory",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'agentbridge' has no attribute {name!r}")
