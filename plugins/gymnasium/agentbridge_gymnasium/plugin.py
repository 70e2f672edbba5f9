"""Registers the Gymnasium bridge with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_gymnasium.env import GymTextEnv, episode_return, solved
from agentbridge_gymnasium.tasks import gym_episodes


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("gym/text", GymTextEnv)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("gym/solved", solved)
    register("gym/return", episode_return)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("gym/episodes", gym_episodes)
