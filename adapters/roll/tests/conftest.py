"""Shared fixtures for the ROLL adapter tests. ROLL is source only (not on the package index): where it imports (a
ROLL checkout on PYTHONPATH, see ../README.md) the validator and conformance tests run through ROLL's own code;
elsewhere (CI) they skip and the compile, layout and protocol tests still run."""

from __future__ import annotations

import os

import pytest
from roll_helpers import ROOT, compile_job

from agentbridge.backends import Job
from agentbridge_roll import keep_roll_logs_out_of_cwd

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
keep_roll_logs_out_of_cwd()


@pytest.fixture(scope="session", autouse=True)
def _repo_root() -> None:
    """Spec paths (examples/...) are relative to the repository root."""
    os.chdir(ROOT)


@pytest.fixture(scope="session")
def small_job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return compile_job(tmp_path_factory.mktemp("roll") / "job")
