"""submit.sh of a 2x8 job gets through OpenRLHF's ``ray.init`` inside the Ray job it submits, and its workers write the
run format in the run directory."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ray_job import train_ray_init_runtime_env

from agentbridge.spec import load_spec
from agentbridge.testing import merge_as_ray_init, ray_driver_env, ray_job_submitted
from agentbridge_openrlhf.backend import OpenRLHFBackend

ROOT = Path(__file__).resolve().parents[3]
PROBE = Path(__file__).with_name("ray_job_probe.py")
TRAINER, PHASES = "openrlhf.cli.train_ppo_ray", "agentbridge.training.phases"


def _job(tmp_path: Path, *sets: str) -> Path:
    spec = load_spec(ROOT / "examples/calculator.yaml", ["resources.nodes=2", "resources.gpus_per_node=8", *sets])
    return OpenRLHFBackend().compile(spec, tmp_path / "job").path


def _entry(entrypoint: list[str]) -> tuple[dict[str, str], list[str]]:
    """The Job's entrypoint ``env VAR=value ... command``: its assignments and its command."""
    head = 1 if entrypoint[0] == "env" else 0
    assigned = dict(a.split("=", 1) for a in itertools.takewhile(lambda a: "=" in a, entrypoint[head:]))
    return assigned, entrypoint[head + len(assigned):]


def test_submitted_job_runtime_env_merges_with_train_ppo_rays_ray_init(tmp_path: Path) -> None:
    """OpenRLHF's train() passes TOKENIZERS_PARALLELISM, NCCL_DEBUG and RAY_ENABLE_ZERO_COPY_TORCH_TENSORS to
    ``ray.init``; Ray refuses a Job runtime env that sets any of them, so the Job sets none (its entrypoint gives
    train() the value it passes on) and carries the run directory for the workers instead."""
    job = _job(tmp_path)
    shared = tmp_path / "shared" / "out"  # storage every node sees
    job_env, entrypoint = ray_job_submitted(job / "submit.sh", tmp_path, {"PYTHON": sys.executable, "OUT": str(shared)})
    assert job_env["working_dir"] == str(job) and "runs/" in job_env["excludes"]
    assert job_env["env_vars"] == {"AGENTBRIDGE_RUN_DIR": str(shared)}
    assigned, command = _entry(entrypoint)
    assert command == ["bash", "submit.sh"] and assigned["AGENTBRIDGE_RAY_JOB"] == "1", entrypoint  # itself, in the job
    assert assigned["OUT"] == str(shared) and assigned["PYTHON"] == sys.executable
    init_env = train_ray_init_runtime_env(TRAINER, {**ray_driver_env(job_env), **assigned})
    assert init_env["env_vars"]["TOKENIZERS_PARALLELISM"] == "false" and init_env["env_vars"]["NCCL_DEBUG"] == "WARN"
    merged = merge_as_ray_init(job_env, init_env)
    assert merged["working_dir"] == str(job) and merged["env_vars"] == {**init_env["env_vars"],
                                                                        "AGENTBRIDGE_RUN_DIR": str(shared)}


def test_a_quote_or_backslash_in_out_stays_data_in_the_jobs_runtime_env(tmp_path: Path) -> None:
    job = _job(tmp_path)
    shared = tmp_path / 'sh"ar\\ed $(x)' / "out"
    job_env, _ = ray_job_submitted(job / "submit.sh", tmp_path, {"PYTHON": sys.executable, "OUT": str(shared)})
    assert job_env["env_vars"] == {"AGENTBRIDGE_RUN_DIR": str(shared)}


def test_the_job_on_a_running_cluster_records_episodes_and_runs_the_phases(tmp_path: Path, gpu_cluster: Any) -> None:
    """submit.sh's job on a cluster of two raylets: its entrypoint checks the cluster, runs agentbridge's prepare
    phase (its warm-started model is the one OpenRLHF trains), OpenRLHF's real ``ray.init`` from inside the Job, and
    finish on the trained model, all with the run directory OUT. Workers started as OpenRLHF starts its vLLM
    engines (no runtime env of their own, one per node) see OUT as AGENTBRIDGE_RUN_DIR, so the agent executor's
    episodes land there. The raylets were started by this process, whose environment lacks the variable."""
    assert "AGENTBRIDGE_RUN_DIR" not in os.environ
    job = _job(tmp_path)
    shared, log = tmp_path / "shared" / "out", tmp_path / "calls.jsonl"
    python = tmp_path / "python"  # PYTHON on the cluster: the trainer and the phases are the probe's
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {PROBE} \"$@\"\n")
    python.chmod(0o755)
    job_env, entrypoint = ray_job_submitted(job / "submit.sh", tmp_path, {"PYTHON": str(python), "OUT": str(shared),
                                                                         "MODEL": "/models/base"})
    warm = shared / "warm_start_model"
    driver_env = ray_driver_env(job_env, gpu_cluster.address) | {
        "RAY_JOB_PROBE_LOG": str(log), "RAY_JOB_PROBE_WORKERS": "1", "RAY_JOB_PROBE_TRAINED": "1",
        "RAY_JOB_PROBE_WARM": str(warm)}
    res = subprocess.run(entrypoint, cwd=job, env=driver_env, capture_output=True, text=True, timeout=500)
    lines = [line for line in res.stdout.splitlines() if line.startswith("WORKERS ")]
    assert res.returncode == 0 and lines, res.stdout[-2000:] + res.stderr[-3000:]
    seen = {w["label"]: w for w in json.loads(lines[-1].removeprefix("WORKERS "))}
    assert set(seen) == {"engine0", "engine1"} and len({w["node"] for w in seen.values()}) == 2
    for worker in seen.values():
        assert worker["env"]["AGENTBRIDGE_RUN_DIR"] == str(shared) and Path(worker["cwd"]) != shared, worker
        assert worker["env"]["TOKENIZERS_PARALLELISM"] == "false"  # train()'s ray.init still gives its own
    episodes = [json.loads(line) for line in (shared / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["task_id"] for e in episodes) == ["engine0", "engine1"]
    assert not list(job.rglob("episodes.jsonl"))
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[:3] for c in calls] == [["-m", PHASES, "prepare"], ["-m", TRAINER, "--actor.model_name_or_path"],
                                      ["-m", PHASES, "finish"]], calls
    assert calls[0][3:] == [str(job), "--run-dir", str(shared)]  # the working_dir's spec; the arms go to OUT
    trainer = calls[1][2:]
    assert trainer[1] == str(warm) and trainer[trainer.index("--ckpt.output_dir") + 1] == f"{shared}/ckpt"
    assert calls[2][3:] == [str(job), "--run-dir", str(shared), "--model", f"{shared}/ckpt"]


@pytest.mark.parametrize("out", [None, "out"])
def test_submit_refuses_an_output_directory_not_every_node_shares(tmp_path: Path, out: str | None) -> None:
    """A relative (or no) OUT would leave the trained model in one node's copy of the working_dir."""
    spec = load_spec(ROOT / "examples/calculator.yaml", ["resources.nodes=2", "resources.gpus_per_node=8"])
    job = OpenRLHFBackend().compile(spec, tmp_path / "job")
    env = {k: v for k, v in os.environ.items() if k != "OUT"} | ({"OUT": out} if out else {})
    res = subprocess.run(["bash", str(job.path / "submit.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stderr.strip() == (
        f"submit.sh: set OUT to an absolute directory on storage every node shares (now: '{out or ''}')")
