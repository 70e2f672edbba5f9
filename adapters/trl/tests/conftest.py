"""Shared fixtures for the TRL adapter tests: the calculator spec shrunk to a few CPU steps."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

SMALL = ["algorithm.steps=2", "algorithm.batch_size=2", "algorithm.group_size=4",
         "data.train.size=32", "data.eval.size=8"]


@pytest.fixture(scope="session")
def small_sets() -> list[str]:
    return list(SMALL)


@pytest.fixture(scope="session")
def small_spec():  # type: ignore[no-untyped-def]
    from agentbridge.spec import load_spec

    return load_spec("examples/calculator.yaml", SMALL)
