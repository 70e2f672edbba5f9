"""Shared fixtures for the veRL adapter tests (run in the veRL 0.9.1 venv on CPU: bash adapters/verl/test.sh)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbridge.backends import Job
from agentbridge.spec import load_spec
from agentbridge_verl.backend import VerlBackend

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Ray 2.60's local ray.init() turns on token auth and writes ~/.ray/auth_token; a later `ray start` then wants the
# token from every client: a second run of this suite on one machine failed test_ray_runner. The tests' local
# clusters run without it, whatever an earlier run left in ~/.ray.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

EXAMPLE = "examples/calculator.yaml"
# backend.name=verl: the spec's backend.options / overrides apply to veRL only when it is the spec's backend
SMALL = ["backend.name=verl", "data.train.size=8", "data.eval.size=4", "algorithm.batch_size=2",
         "algorithm.group_size=4"]


def compile_job(out: Path, *sets: str, example: str = EXAMPLE) -> Job:
    """The example compiled with the small settings plus ``sets``, its manifest written (with no spec checks, so a
    broken job can be made: ``agentbridge.backends.compile_job`` checks first)."""
    job = VerlBackend().compile(load_spec(example, [*SMALL, *sets]), out)
    job.write_manifest()
    return job


def pytest_configure(config: pytest.Config) -> None:
    """Ray's and TransferQueue's threads can crash the interpreter's shutdown after a green run (CI: 115 passed, then
    SIGSEGV): end once the report is written."""
    from agentbridge.testing import ExitAfterReport

    config.pluginmanager.register(ExitAfterReport(), "agentbridge-exit-after-report")


@pytest.fixture(scope="session")
def small_job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return compile_job(tmp_path_factory.mktemp("verl") / "job")


@pytest.fixture(scope="session", autouse=True)
def _repo_root() -> None:
    os.chdir(Path(__file__).resolve().parents[3])


@pytest.fixture(scope="module", autouse=True)
def _close_transfer_queue() -> Iterator[None]:
    """The V1 trainer's local Ray and TransferQueue (``agentbridge_verl.inprocess_v1``) live for one test module:
    left up, they starve the local Ray cluster ``test_ray_runner`` starts on two cores."""
    yield
    import sys

    if "agentbridge_verl.inprocess_v1" in sys.modules:
        sys.modules["agentbridge_verl.inprocess_v1"].close_transfer_queue()


@pytest.fixture(scope="session")
def tiny_model() -> tuple[Any, Any]:
    """builtin:tiny (random-init Qwen2 + its tokenizer), float32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentbridge.models import load_tokenizer, resolve_model_path

    torch.manual_seed(0)
    torch.set_num_threads(1)  # a 128-wide model gains nothing from threads; 2 shared cores lose a lot
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny"), dtype=torch.float32).eval()
    return model, load_tokenizer("builtin:tiny")


@pytest.fixture(scope="session")
def scripted_rollout(small_job: Job, tiny_model: tuple[Any, Any]) -> dict[str, Any]:
    """veRL's AgentLoopWorker on 2 prompts x 4 calculator episodes played by the expert (half answer wrong)."""
    from worker_harness import (
        HFServerStandIn,
        calculator_script,
        compose_worker_config,
        generate,
        input_batch,
        record_trajectories,
    )

    from agentbridge.rollout.agent import load_tasks

    model, tokenizer = tiny_model
    cfg = compose_worker_config(small_job.path)
    recorder = record_trajectories()
    spec = load_spec(small_job.path / "spec.yaml")
    server = HFServerStandIn(model, tokenizer, calculator_script(load_tasks(spec, "train")))
    batch = input_batch(cfg, tokenizer, 2)
    gen = generate(cfg, server, batch)
    return {"job": small_job, "cfg": cfg, "gen": gen, "uid": batch.non_tensor_batch["uid"],
            "trajectories": list(recorder.trajectories)}


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[Any]:
    """A local Ray cluster of two raylets declaring 8 logical GPUs each (no CUDA behind them) and 24 CPUs (veRL's
    bundles are ``{"CPU": 3, "GPU": 1}``: ``ResourcePoolManager.max_colocate_count``), for one test module; shut down
    after it. No worker is prestarted."""
    from agentbridge.testing import logical_gpu_cluster

    with logical_gpu_cluster(nodes=2, gpus_per_node=8, cpus_per_node=24) as cluster:
        yield cluster
