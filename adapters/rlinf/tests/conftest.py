"""Shared fixtures for the RLinf adapter tests (run in the RLinf 0.3.0 venv on CPU: bash adapters/rlinf/test.sh; the
compile tests also run in the main venv, where RLinf is not installed)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from agentbridge.backends import Job
from agentbridge.spec import load_spec
from agentbridge_rlinf.backend import RlinfBackend

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = "examples/calculator.yaml"
# backend.name=rlinf: the spec's backend.options / overrides apply to RLinf only when it is the spec's backend
SMALL = ["backend.name=rlinf", "data.train.size=8", "data.eval.size=4", "algorithm.batch_size=2",
         "algorithm.group_size=4"]
HAS_RLINF = importlib.util.find_spec("rlinf") is not None
needs_rlinf = pytest.mark.skipif(not HAS_RLINF, reason="rlinf is not installed here (bash adapters/rlinf/test.sh)")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session", autouse=True)
def _repo_root() -> None:
    """Spec paths (examples/...) are relative to the repository root."""
    os.chdir(ROOT)


def compile_job(out: Path, *sets: str, example: str = EXAMPLE) -> Job:
    """The example compiled with the small settings plus ``sets``, its manifest written (no spec checks, so a broken
    job can be made: ``agentbridge.backends.compile_job`` checks first)."""
    job = RlinfBackend().compile(load_spec(ROOT / example, [*SMALL, *sets]), out)
    job.write_manifest()
    return job


@pytest.fixture(scope="session")
def small_job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return compile_job(tmp_path_factory.mktemp("rlinf") / "job")
