"""submit.sh of a 2x8 job gets through veRL's ``ray.init`` inside the Ray job it submits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import compile_job

from agentbridge.testing import merge_as_ray_init, ray_driver_env, ray_job_submitted

PROBE = Path(__file__).with_name("ray_init_probe.py")


NO_PHASES = {"AGENTBRIDGE_PHASES": "off"}  # launch.sh up to the trainer's start only


def test_submitted_job_runtime_env_merges_with_main_ppos_ray_init(tmp_path: Path) -> None:
    """veRL's main_ppo always passes ``runtime_env.py_executable`` (null by default) to ``ray.init``; Ray refuses
    a Job whose runtime env shares a key with it, so the interpreter travels as main_ppo's own setting."""
    job = compile_job(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8", "algorithm.batch_size=16")
    python = tmp_path / "python"  # what PYTHON names on the cluster: here it runs main_ppo up to ray.init
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {PROBE} \"$@\"\n")
    python.chmod(0o755)
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path, {"PYTHON": str(python)})
    assert job_env["working_dir"] == str(job.path) and job_env["env_vars"]["AGENTBRIDGE_JOB"] == "job"
    res = subprocess.run(entrypoint, cwd=job.path, env=ray_driver_env(job_env) | NO_PHASES, capture_output=True,
                         text=True, timeout=300)
    lines = [line for line in res.stdout.splitlines() if line.startswith("RAY_INIT ")]
    assert res.returncode == 0 and lines, res.stderr[-3000:]
    init_env = json.loads(lines[-1].removeprefix("RAY_INIT "))["runtime_env"]
    merged = merge_as_ray_init(job_env, init_env)
    # Ray starts the TaskRunner and every worker with the job's interpreter
    assert merged["py_executable"] == str(python) and merged["working_dir"] == str(job.path)
    assert merged["env_vars"]["AGENTBRIDGE_JOB"] == "job" and merged["env_vars"]["NCCL_DEBUG"] == "WARN"
