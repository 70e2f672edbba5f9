"""submit.sh's Ray job carries the run format to every worker: its runtime env, through Ray's own merge with the
``ray.init`` slime makes (none: Ray's first call connects with no runtime env of its own)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from slime_testkit import compile_job

from agentbridge.testing import merge_as_ray_init, ray_job_submitted

# the replay parses the recorded `ray job submit` with Ray's own CLI code and merges with Ray's own code
pytest.importorskip("ray.dashboard.modules.dashboard_sdk", reason="Ray is not installed here")

# a run directory whose name the shell must keep as data: a quote, a backslash, a command substitution
ODD = 'sh"ar\\ed $(touch {tmp}/pwned) `touch {tmp}/pwned`'


@pytest.mark.parametrize("name", ["shared", ODD])
def test_submitted_job_gives_every_worker_the_run_directory(tmp_path: Path, name: str) -> None:
    job = compile_job(tmp_path / "job")
    run_dir = tmp_path / name.format(tmp=tmp_path) / "run"  # absolute, on storage every node shares
    slime, megatron = tmp_path / 'sl"ime', tmp_path / "mega\\tron"
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path, {
        "PYTHON": sys.executable, "RUN_DIR": str(run_dir), "SLIME_DIR": str(slime), "MEGATRON_DIR": str(megatron),
        "no_proxy": ""})
    assert job_env["working_dir"] == str(job.path) and f"RUN_DIR={run_dir}" in entrypoint
    # slime calls no ray.init itself (its first Ray call connects): the workers get the Job's runtime env, which
    # slime's actors extend with their own env_vars (add_default_ray_env_vars), none of these
    workers = merge_as_ray_init(job_env, None)["env_vars"]
    assert workers == {"AGENTBRIDGE_RUN_DIR": str(run_dir), "TENSORBOARD_DIR": f"{run_dir}/tensorboard/slime",
                       "PYTHONPATH": f"{slime}:{megatron}", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                       "NCCL_NVLS_ENABLE": "0", "RAY_USE_UVLOOP": "0", "no_proxy": "localhost,127.0.0.1"}
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(("topology", "nvls"), [("GPU0\tX\tNV18\nGPU1\tNV18\tX\n", "1"),
                                                ("GPU0\tX\tPHB\nGPU1\tPHB\tX\n", "0")])
def test_nccl_nvls_follows_the_nodes_nvlink_as_slimes_launcher_sets_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       topology: str, nvls: str) -> None:
    """NCCL_NVLS_ENABLE is 1 when ``nvidia-smi topo -m`` shows NVLink (``NV<n>``), as slime's own launcher decides;
    a proxy the submitting shell sets is kept, with the local addresses exempt."""
    import os

    job = compile_job(tmp_path / "job")
    bin_dir = tmp_path / "nvidia-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{topology}'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    job_env, _ = ray_job_submitted(job.path / "submit.sh", tmp_path, {
        "PYTHON": sys.executable, "RUN_DIR": str(tmp_path / "run"), "SLIME_DIR": "/opt/slime",
        "no_proxy": "10.0.0.0/8"})
    assert job_env["env_vars"]["NCCL_NVLS_ENABLE"] == nvls
    assert job_env["env_vars"]["no_proxy"] == "localhost,127.0.0.1,10.0.0.0/8"


def test_submitted_job_without_megatron_dir_keeps_slime_on_the_path(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job")
    job_env, _ = ray_job_submitted(job.path / "submit.sh", tmp_path, {
        "PYTHON": sys.executable, "RUN_DIR": str(tmp_path / "run"), "SLIME_DIR": "/opt/slime", "MEGATRON_DIR": ""})
    assert job_env["env_vars"]["PYTHONPATH"] == "/opt/slime"
