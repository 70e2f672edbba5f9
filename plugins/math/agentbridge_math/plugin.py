"""Registers the calculator agent with agentbridge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_math.calculator import calculator
from agentbridge_math.env import CalculatorEnv, exact_number
from agentbridge_math.tasks import arithmetic_tasks


@hookimpl
def register_environments(register: Callable[[str, Any], None]) -> None:
    register("math/calculator", CalculatorEnv)


@hookimpl
def register_tools(register: Callable[[Any], None]) -> None:
    register(calculator)


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("math/exact_answer", exact_number)


@hookimpl
def register_datasets(register: Callable[[str, Any], None]) -> None:
    register("math/arithmetic", arithmetic_tasks)
