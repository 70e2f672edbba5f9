"""Registers the TRL backend (imports no TRL: the backend loads it only to validate or run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_trl.backend import TrlBackend


@hookimpl
def register_backends(register: Callable[[Any], None]) -> None:
    register(TrlBackend())
