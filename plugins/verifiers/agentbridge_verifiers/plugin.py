"""Registers the verifiers bridge with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_verifiers.data import verifiers_tasks
from agentbridge_verifiers.env import VerifiersEnvironment
from agentbridge_verifiers.rewards import rubric, total


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("verifiers/env", VerifiersEnvironment)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("verifiers/rubric", rubric)
    register("verifiers/reward", total)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("verifiers/tasks", verifiers_tasks)
