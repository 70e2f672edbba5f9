"""Registers reasoning-gym's tasks, the answer environment and the verifier reward with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_reasoning_gym.env import AnswerEnv, verified_score
from agentbridge_reasoning_gym.tasks import rg_tasks


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("rg/answer", AnswerEnv)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("rg/verified", verified_score)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("rg/tasks", rg_tasks)
