"""Shared fixtures: the built-in tokenizers (built offline once, cached) and a calculator agent."""

from __future__ import annotations

from typing import Any

import pytest

from agentbridge.spec import load_spec


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
