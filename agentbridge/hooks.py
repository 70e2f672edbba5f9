"""pluggy hook specifications (DESIGN §4). Plugins implement these with ``@hookimpl``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT = "agentbridge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_backends(register: Callable[[Any], None]) -> None:
    """Register Backend objects: ``register(backend)`` (id = ``backend.name``)."""


@hookspec
def register_environments(register: Callable[[str, Any], None]) -> None:
    """Register environment factories: ``register(id, cls_or_factory)``; called with the spec's args."""


@hookspec
def register_tools(register: Callable[[Any], None]) -> None:
    """Register tools: ``register(tool)`` with a ``@tool`` function (id = tool name)."""


@hookspec
def register_rewards(register: Callable[[str, Any], None]) -> None:
    """Register reward functions ``(trajectory, task) -> float | dict``: ``register(id, fn)``."""


@hookspec
def register_datasets(register: Callable[[str, Any], None]) -> None:
    """Register task generators ``(split, size, seed, **args) -> list[Task]``: ``register(id, fn)``."""


@hookspec
def register_tool_parsers(register: Callable[[str, Any], None]) -> None:
    """Register tool-call parsers (objects with ``parse(text)``): ``register(name, parser)``."""


@hookspec
def modify_backend_config(spec: Any, backend: str, config: dict[str, Any]) -> None:
    """Edit a backend's compiled config in place before it is written."""


@hookspec
def on_episode_end(trajectory: Any) -> None:
    """Observe every finished trajectory (loggers, dataset writers)."""


@hookspec
def on_metrics(step: int, metrics: dict[str, float], run: Any) -> None:
    """Export one training step's normalized metrics (TensorBoard, W&B, MLflow, ...)."""
