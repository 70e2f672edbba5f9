"""Registers the OpenEnv bridge with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_openenv.data import openenv_seeds
from agentbridge_openenv.env import OpenEnvEnvironment, episode_return, success


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("openenv/remote", OpenEnvEnvironment)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("openenv/success", success)
    register("openenv/return", episode_return)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("openenv/seeds", openenv_seeds)
