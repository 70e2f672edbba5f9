"""Registers the wordplay pieces with agentbridge (the module named by the entry point)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_wordplay.env import ReverseEnv
from agentbridge_wordplay.rewards import exact_reverse
from agentbridge_wordplay.tasks import word_tasks
from agentbridge_wordplay.tools import reverse_text


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("wordplay/reverse", ReverseEnv)


@hookimpl
def register_tools(register: Callable[[Any], None]) -> None:
    register(reverse_text)  # id = the function name


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("wordplay/exact", exact_reverse)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("wordplay/words", word_tasks)
