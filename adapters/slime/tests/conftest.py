"""Fixtures of the slime adapter tests (what they share besides: ``slime_testkit``)."""

from __future__ import annotations

import os

import pytest
from slime_testkit import ROOT, compile_job

from agentbridge.backends import Job


@pytest.fixture(scope="session", autouse=True)
def _repo_root() -> None:
    """Spec paths (examples/...) are relative to the repository root."""
    os.chdir(ROOT)


@pytest.fixture(scope="session")
def small_job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return compile_job(tmp_path_factory.mktemp("slime") / "job")
