"""Registers the OpenRLHF backend (imports no OpenRLHF or torch: only validate and the job itself load them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge import hookimpl
from agentbridge_openrlhf.backend import OpenRLHFBackend


@hookimpl
def register_backends(register: Callable[[Any], None]) -> None:
    register(OpenRLHFBackend())
