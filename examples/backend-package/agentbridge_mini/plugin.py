"""Registers the ``mini`` backend with agentbridge (the module named by the entry point)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_mini.backend import MiniBackend


@hookimpl
def register_backends(register: Callable[[Any], None]) -> None:
    register(MiniBackend())
