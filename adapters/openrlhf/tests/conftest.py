"""Shared fixtures for the OpenRLHF adapter tests (run in the OpenRLHF 0.11.2 venv: adapters/openrlhf/test.sh)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SMALL = ["algorithm.steps=2", "algorithm.batch_size=2", "algorithm.group_size=4", "data.train.size=8",
         "data.eval.size=4"]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config: pytest.Config) -> None:
    """Ray's threads can crash the interpreter's shutdown after a green run: end once the report is written."""
    from agentbridge.testing import ExitAfterReport

    config.pluginmanager.register(ExitAfterReport(), "agentbridge-exit-after-report")


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
    OpenRLHFBackend().compile(load_spec(ROOT / "examples/calculator.yaml"), out).write_manifest()
    return out



@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[Any]:
    """A local Ray cluster of two raylets declaring 8 logical GPUs each (no CUDA behind them) and 8 CPUs (OpenRLHF's
    bundles are ``{"GPU": 1, "CPU": 1}``), for one test module; shut down after it. No worker is prestarted."""
    from agentbridge.testing import logical_gpu_cluster

    with logical_gpu_cluster(nodes=2, gpus_per_node=8, cpus_per_node=8) as cluster:
        yield cluster
