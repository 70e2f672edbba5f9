"""Registers the veRL backend (imports no veRL or torch: the backend loads them only to validate or run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_verl.backend import VerlBackend


@hookimpl
def register_backends(register: Callable[[Any], None]) -> None:
    register(VerlBackend())
