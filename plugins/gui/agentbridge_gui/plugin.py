"""Registers the GUI agent with agentbridge: environment and dataset ``gui/miniwob``, rewards ``gui/success`` and
``gui/grounding``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_gui.env import MiniWoBEnv, grounding_reward, task_reward
from agentbridge_gui.tasks import miniwob_tasks


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("gui/miniwob", MiniWoBEnv)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("gui/success", task_reward)
    register("gui/grounding", grounding_reward)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("gui/miniwob", miniwob_tasks)
