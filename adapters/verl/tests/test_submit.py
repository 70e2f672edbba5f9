"""submit.sh of a 2x8 job gets through veRL's ``ray.init`` inside the Ray job it submits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import compile_job

from agentbridge.testing import merge_as_ray_init, ray_driver_env, ray_job_submitted

PROBE = Path(__file__).with_name("ray_init_probe.py")


NO_PHASES = {"AGENTBRIDGE_PHASES": "off"}  # launch.sh up to the trainer's start only


def test_submitted_job_runtime_env_merges_with_main_ppos_ray_init(tmp_path: Path, gpu_cluster: Any) -> None:
    """veRL's main_ppo always passes ``runtime_env.py_executable`` (null by default) to ``ray.init``; Ray refuses
    a Job whose runtime env shares a key with it, so the interpreter travels as main_ppo's own setting. The
    entrypoint runs where Ray's job supervisor runs it, joined to a 2x8 cluster (its check before launch passes)."""
    job = compile_job(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8", "algorithm.batch_size=16")
    python = tmp_path / "python"  # what PYTHON names on the cluster: here it runs main_ppo up to ray.init
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {PROBE} \"$@\"\n")
    python.chmod(0o755)
    shared = tmp_path / "shared" / "run"  # storage every node sees
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path,
                                            {"PYTHON": str(python), "RUN_DIR": str(shared)})
    assert job_env["working_dir"] == str(job.path) and job_env["env_vars"]["AGENTBRIDGE_JOB"] == "job"
    assert f"RUN_DIR={shared}" in entrypoint  # launch.sh writes checkpoints there, not in the working_dir copy
    driver_env = ray_driver_env(job_env, gpu_cluster.address) | NO_PHASES
    res = subprocess.run(entrypoint, cwd=job.path, env=driver_env, capture_output=True, text=True, timeout=300)
    lines = [line for line in res.stdout.splitlines() if line.startswith("RAY_INIT ")]
    assert res.returncode == 0 and lines, res.stderr[-3000:]
    init_env = json.loads(lines[-1].removeprefix("RAY_INIT "))["runtime_env"]
    merged = merge_as_ray_init(job_env, init_env)
    # Ray starts the TaskRunner and every worker with the job's interpreter
    assert merged["py_executable"] == str(python) and merged["working_dir"] == str(job.path)
    assert merged["env_vars"]["AGENTBRIDGE_JOB"] == "job" and merged["env_vars"]["NCCL_DEBUG"] == "WARN"


@pytest.mark.parametrize("run_dir", [None, "runs/calc"])
def test_submit_refuses_a_run_directory_not_every_node_shares(tmp_path: Path, run_dir: str | None) -> None:
    """A relative (or no) RUN_DIR would put each node's checkpoint shards in its own copy of the working_dir."""
    job = compile_job(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8", "algorithm.batch_size=16")
    env = {k: v for k, v in os.environ.items() if k != "RUN_DIR"} | ({"RUN_DIR": run_dir} if run_dir else {})
    res = subprocess.run(["bash", str(job.path / "submit.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stderr.strip() == (
        f"submit.sh: set RUN_DIR to an absolute directory on storage every node shares (now: '{run_dir or ''}')")
