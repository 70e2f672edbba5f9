"""submit.sh of a 2x8 job gets through OpenRLHF's ``ray.init`` inside the Ray job it submits."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ray_job import train_ray_init_runtime_env

from agentbridge.spec import load_spec
from agentbridge.testing import merge_as_ray_init, ray_driver_env, ray_job_submitted
from agentbridge_openrlhf.backend import OpenRLHFBackend

ROOT = Path(__file__).resolve().parents[3]


def test_submitted_job_runtime_env_merges_with_train_ppo_rays_ray_init(tmp_path: Path) -> None:
    """OpenRLHF's train() passes TOKENIZERS_PARALLELISM, NCCL_DEBUG and RAY_ENABLE_ZERO_COPY_TORCH_TENSORS to
    ``ray.init``; Ray refuses a Job runtime env that sets any of them, so the Job sets none and its entrypoint
    gives train() the value it passes on."""
    spec = load_spec(ROOT / "examples/calculator.yaml", ["resources.nodes=2", "resources.gpus_per_node=8"])
    job = OpenRLHFBackend().compile(spec, tmp_path / "job")
    shared = tmp_path / "shared" / "out"  # storage every node sees
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path,
                                            {"PYTHON": sys.executable, "OUT": str(shared)})
    assert entrypoint[entrypoint.index("--ckpt.output_dir") + 1] == f"{shared}/ckpt"  # not in the working_dir
    assert job_env["working_dir"] == str(job.path) and "runs/" in job_env["excludes"]
    head = 1 if entrypoint[0] == "env" else 0  # env VAR=value ... command
    assigned = dict(a.split("=", 1) for a in itertools.takewhile(lambda a: "=" in a, entrypoint[head:]))
    command = entrypoint[head + len(assigned):]
    assert command[:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"], command
    init_env = train_ray_init_runtime_env(command[2], {**ray_driver_env(job_env), **assigned})
    assert init_env["env_vars"]["TOKENIZERS_PARALLELISM"] == "false" and init_env["env_vars"]["NCCL_DEBUG"] == "WARN"
    merged = merge_as_ray_init(job_env, init_env)
    assert merged["working_dir"] == str(job.path) and merged["env_vars"] == init_env["env_vars"]


@pytest.mark.parametrize("out", [None, "out"])
def test_submit_refuses_an_output_directory_not_every_node_shares(tmp_path: Path, out: str | None) -> None:
    """A relative (or no) OUT would leave the trained model in one node's copy of the working_dir."""
    spec = load_spec(ROOT / "examples/calculator.yaml", ["resources.nodes=2", "resources.gpus_per_node=8"])
    job = OpenRLHFBackend().compile(spec, tmp_path / "job")
    env = {k: v for k, v in os.environ.items() if k != "OUT"} | ({"OUT": out} if out else {})
    res = subprocess.run(["bash", str(job.path / "submit.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stderr.strip() == (
        f"submit.sh: set OUT to an absolute directory on storage every node shares (now: '{out or ''}')")
