"""Registers the SkyRL-gym bridge with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_skyrl_gym.env import SkyRLGymEnv, episode_return, final_reward, solved
from agentbridge_skyrl_gym.tasks import arithmetic_tasks, dataset_rows, sql_tasks


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("skyrl/env", SkyRLGymEnv)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("skyrl/final", final_reward)
    register("skyrl/return", episode_return)
    register("skyrl/solved", solved)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("skyrl/rows", dataset_rows)
    register("skyrl/arithmetic", arithmetic_tasks)
    register("skyrl/sql", sql_tasks)
