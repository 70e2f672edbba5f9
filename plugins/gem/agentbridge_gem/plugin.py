"""Registers the GEM bridge with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_gem.env import GemEnvironment, episode_return, final_reward, success
from agentbridge_gem.tasks import gem_episodes


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("gem/env", GemEnvironment)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("gem/success", success)
    register("gem/final", final_reward)
    register("gem/return", episode_return)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("gem/episodes", gem_episodes)
