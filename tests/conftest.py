"""Shared fixtures: the built-in tokenizers (built offline once, cached), a calculator agent, and the example
third-party backend as the core's fake backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbridge.spec import load_spec

MINI_PACKAGE = Path(__file__).resolve().parents[1] / "examples" / "backend-package"


@pytest.fixture(scope="session")
def qwen_tokenizer() -> Any:
    """The real Qwen2.5 vocabulary with the Qwen2.5 chat template."""
    from agentbridge.models import load_tokenizer

    return load_tokenizer("builtin:tiny-qwen2.5")


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Any:
    from agentbridge.models import load_tokenizer

    return load_tokenizer("builtin:tiny")


@pytest.fixture(scope="session")
def calculator_spec() -> Any:
    return load_spec("examples/calculator.yaml")


@pytest.fixture
def mini_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The ``mini`` backend of examples/backend-package, from its source tree: the fake backend of the core's tests.

    Importable here and in the processes a test starts (``PYTHONPATH``); registered in this process unless a
    plugin (its entry point, or the example's own conftest) already did.
    """
    from agentbridge.plugins import get_plugins

    monkeypatch.syspath_prepend(str(MINI_PACKAGE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(MINI_PACKAGE), os.environ.get("PYTHONPATH"))
                                                     if p))
    plugins = get_plugins()
    ours = "mini" not in plugins.backends.ids()
    if ours:
        from agentbridge_mini import __version__, plugin

        plugins.register("mini-under-test", plugin, ("agentbridge-mini (source tree)", __version__))
    yield plugins.backends.get("mini")
    if ours:
        plugins.unregister("mini-under-test")
