"""agentbridge: one agent spec, any RL backend.

What plugin authors write against is importable from here, and a plugin imports nothing else from agentbridge (the
import contract "Plugins import only the public face", pyproject.toml)::

    from agentbridge import hookimpl, tool, Environment, ToolEnvironment, Task, StepResult, Message

- the plugin hooks: :data:`hookimpl`;
- environments (``agentbridge.env``): :class:`Environment`, :class:`Task`, :class:`Message`, :class:`StepResult`,
  :class:`ToolCall`, :func:`user` (a user message), :func:`text_of` (a message's text), :func:`load_image`;
- tools (``agentbridge.tools``): :func:`tool`, :class:`ToolSpec`, :class:`ToolEnvironment`;
- an episode, as rewards and metrics read it: :class:`Trajectory`;
- rewards' helpers (``agentbridge.rewards``): :func:`extract_answer`, :func:`normalize_answer`, :func:`gold_answers`;
- datasets' capacity (``agentbridge.datasets``): :func:`declares_capacity`, :func:`capacity_line`,
  :func:`seed_block_capacity`;
- the cache plugins keep built data in (``agentbridge.cache``): :func:`cache_dir`, :func:`cache_key`,
  :func:`use_cache_entry`, :func:`mark_built`.

Backend adapters import the adapter kit, :mod:`agentbridge.adapter`, and the spec, :mod:`agentbridge.spec`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbridge.cache import cache_dir, cache_key, mark_built, use_cache_entry
    from agentbridge.datasets import capacity_line, declares_capacity, seed_block_capacity
    from agentbridge.env import Environment, Message, StepResult, Task, ToolCall, load_image, text_of, user
    from agentbridge.hooks import hookimpl
    from agentbridge.rewards import extract_answer, gold_answers, normalize_answer
    from agentbridge.tools import ToolEnvironment, ToolSpec, tool
    from agentbridge.trajectory import Trajectory

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
    "ToolCall": "agentbridge.env",
    "user": "agentbridge.env",
    "text_of": "agentbridge.env",
    "load_image": "agentbridge.env",
    "Trajectory": "agentbridge.trajectory",
    "extract_answer": "agentbridge.rewards",
    "normalize_answer": "agentbridge.rewards",
    "gold_answers": "agentbridge.rewards",
    "declares_capacity": "agentbridge.datasets",
    "capacity_line": "agentbridge.datasets",
    "seed_block_capacity": "agentbridge.datasets",
    "cache_dir": "agentbridge.cache",
    "cache_key": "agentbridge.cache",
    "use_cache_entry": "agentbridge.cache",
    "mark_built": "agentbridge.cache",
}
__all__ = [
    "__version__", "hookimpl", "tool", "ToolEnvironment", "ToolSpec", "Environment", "Task", "StepResult", "Message",
    "ToolCall", "user", "text_of", "load_image", "Trajectory", "extract_answer", "normalize_answer", "gold_answers",
    "declares_capacity", "capacity_line", "seed_block_capacity", "cache_dir", "cache_key", "use_cache_entry",
    "mark_built",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'agentbridge' has no attribute {name!r}")
