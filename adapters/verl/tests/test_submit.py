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


def _probe_python(tmp_path: Path) -> Path:
    """What PYTHON names on the cluster: here it runs main_ppo up to ray.init (and every Ray worker, unchanged)."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {PROBE} \"$@\"\n")
    python.chmod(0o755)
    return python


def test_submitted_job_runtime_env_merges_with_main_ppos_ray_init(tmp_path: Path, gpu_cluster: Any) -> None:
    """veRL's main_ppo always passes ``runtime_env.py_executable`` (null by default) to ``ray.init``; Ray refuses
    a Job whose runtime env shares a key with it, so the interpreter travels as main_ppo's own setting. The
    entrypoint runs where Ray's job supervisor runs it, joined to a 2x8 cluster (its check before launch passes)."""
    job = compile_job(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8", "algorithm.batch_size=16")
    python = _probe_python(tmp_path)
    shared = tmp_path / "shared" / "run"  # storage every node sees
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path,
                                            {"PYTHON": str(python), "RUN_DIR": str(shared), **NO_PHASES})
    assert job_env["working_dir"] == str(job.path) and job_env["env_vars"]["AGENTBRIDGE_JOB"] == "job"
    assert f"RUN_DIR={shared}" in entrypoint  # launch.sh writes checkpoints there, not in the working_dir copy
    driver_env = ray_driver_env(job_env, gpu_cluster.address)
    res = subprocess.run(entrypoint, cwd=job.path, env=driver_env, capture_output=True, text=True, timeout=300)
    lines = [line for line in res.stdout.splitlines() if line.startswith("RAY_INIT ")]
    assert res.returncode == 0 and lines, res.stderr[-3000:]
    init_env = json.loads(lines[-1].removeprefix("RAY_INIT "))["runtime_env"]
    merged = merge_as_ray_init(job_env, init_env)
    # Ray starts the TaskRunner and every worker with the job's interpreter
    assert merged["py_executable"] == str(python) and merged["working_dir"] == str(job.path)
    assert merged["env_vars"]["AGENTBRIDGE_JOB"] == "job" and merged["env_vars"]["NCCL_DEBUG"] == "WARN"
    # the run format rides in main_ppo's own runtime env, beside the Job's (a key in both would fail the merge)
    assert merged["env_vars"]["AGENTBRIDGE_RUN_DIR"] == str(shared) and "AGENTBRIDGE_RUN_DIR" not in job_env["env_vars"]


def test_workers_on_a_running_cluster_record_in_the_run_directory(tmp_path: Path, gpu_cluster: Any) -> None:
    """The job submitted to a cluster of two raylets: main_ppo's real ``ray.init`` joins it from inside the Job, and
    workers started as veRL starts them (the TaskRunner; one rank per node, with a RayWorkerGroup's own env_vars;
    one agent-loop worker per node) see the run directory's absolute path, so the agent loop's episodes and veRL's
    file logger write there and launch.sh converts the metrics. The raylets were started by this process, whose
    environment has neither variable: a worker only has them from the runtime env."""
    assert not {"AGENTBRIDGE_RUN_DIR", "VERL_FILE_LOGGER_PATH"} & set(os.environ)
    job = compile_job(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8", "algorithm.batch_size=16")
    shared = tmp_path / "shared" / "run"
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path, {
        "PYTHON": str(_probe_python(tmp_path)), "RUN_DIR": str(shared), **NO_PHASES})
    driver_env = ray_driver_env(job_env, gpu_cluster.address) | {"RAY_INIT_PROBE_WORKERS": "1"}
    res = subprocess.run(entrypoint, cwd=job.path, env=driver_env, capture_output=True, text=True, timeout=500)
    lines = [line for line in res.stdout.splitlines() if line.startswith("WORKERS ")]
    assert res.returncode == 0 and lines, res.stdout[-2000:] + res.stderr[-3000:]
    seen = {w["label"]: w for w in json.loads(lines[-1].removeprefix("WORKERS "))}
    loops = ["agent_loop_worker_0", "agent_loop_worker_1"]
    assert set(seen) == {"task_runner", "rank0", "rank1", *loops}
    assert len({seen["rank0"]["node"], seen["rank1"]["node"]}) == 2  # one rank on each raylet
    assert len({seen[name]["node"] for name in loops}) == 2  # and one agent-loop worker
    for worker in seen.values():
        assert worker["env"]["AGENTBRIDGE_RUN_DIR"] == str(shared), worker
        assert worker["env"]["VERL_FILE_LOGGER_PATH"] == f"{shared}/verl_metrics.jsonl", worker
        assert worker["env"]["AGENTBRIDGE_JOB"] == "job" and Path(worker["cwd"]) != shared  # the Job's, in its copy
    assert [seen[f"rank{i}"]["env"]["RANK"] for i in range(2)] == ["0", "1"]  # the rank's own env_vars kept
    episodes = [json.loads(line) for line in (shared / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["task_id"] for e in episodes) == sorted(seen)
    # veRL's file logger wrote in the run directory, and launch.sh turned its row into the run's metrics.jsonl
    assert json.loads((shared / "verl_metrics.jsonl").read_text())["data"] == {"probe/step": 1.0}
    assert (shared / "metrics.jsonl").is_file(), res.stderr[-2000:]
    assert not list(job.path.rglob("episodes.jsonl")) and not list(job.path.rglob("verl_metrics.jsonl"))


@pytest.mark.parametrize("run_dir", [None, "runs/calc"])
def test_submit_refuses_a_run_directory_not_every_node_shares(tmp_path: Path, run_dir: str | None) -> None:
    """A relative (or no) RUN_DIR would put each node's checkpoint shards in its own copy of the working_dir."""
    job = compile_job(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8", "algorithm.batch_size=16")
    env = {k: v for k, v in os.environ.items() if k != "RUN_DIR"} | ({"RUN_DIR": run_dir} if run_dir else {})
    res = subprocess.run(["bash", str(job.path / "submit.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stderr.strip() == (
        f"submit.sh: set RUN_DIR to an absolute directory on storage every node shares (now: '{run_dir or ''}')")
