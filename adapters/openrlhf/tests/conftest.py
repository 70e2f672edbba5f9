"""Shared fixtures for the OpenRLHF adapter tests (run in the OpenRLHF 0.11.2 venv: adapters/openrlhf/test.sh)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SMALL = ["algorithm.steps=2", "algorithm.batch_size=2", "algorithm.group_size=4", "data.train.size=8",
         "data.eval.size=4"]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True, scope="session")
def _repo_root() -> None:
    """Spec paths (examples/...) are relative to the repository root."""
    os.chdir(ROOT)


@pytest.fixture(scope="session")
def calculator_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/calculator.yaml compiled for OpenRLHF (the full spec, as a user would)."""
    from agentbridge.spec import load_spec
    from agentbridge_openrlhf.backend import OpenRLHFBackend

    out = tmp_path_factory.mktemp("jobs") / "calculator"
    OpenRLHFBackend().compile(load_spec(ROOT / "examples/calculator.yaml"), out)
    return out

