"""Registers the TextWorld bridge with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_textworld.env import TextWorldEnv, score, won
from agentbridge_textworld.games import textworld_games


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("textworld/game", TextWorldEnv)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("textworld/won", won)
    register("textworld/score", score)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("textworld/games", textworld_games)
