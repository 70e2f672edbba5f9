"""The faces' lazy re-exports: a name the kit re-exports from the core is imported where it is defined on first use
(and on every use: a test that patches the core's module is seen), so that importing a face stays light."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def load(table: Mapping[str, str], module: str, name: str) -> Any:
    """``name`` of face ``module``, from the core module ``table[name]`` says (``"module"``, or ``"module:attribute"``
    where the core calls it otherwise)."""
    if name not in table:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    where, _, attribute = table[name].partition(":")
    return getattr(importlib.import_module(where), attribute or name)
