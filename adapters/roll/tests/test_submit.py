"""submit.sh's Ray job carries the run format to every worker: its runtime env, through Ray's own merge with the one
ROLL's ``roll.distributed.scheduler.initialize.init`` passes to ``ray.init`` (the platform's env vars)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from roll_helpers import compile_job

from agentbridge.testing import merge_as_ray_init, ray_job_submitted

# the replay parses the recorded `ray job submit` with Ray's own CLI code and merges with Ray's own code
pytest.importorskip("ray.dashboard.modules.dashboard_sdk", reason="Ray is not installed here")

# a run directory whose name the shell must keep as data: a quote, a backslash, a command substitution
ODD = 'sh"ar\\ed $(touch {tmp}/pwned) `touch {tmp}/pwned`'
# CudaPlatform.get_custom_env_vars() at ROLL 8eb27cc (roll/platforms/cuda.py), where ROLL does not import here
CUDA_ENV_VARS = {"TORCH_EXTENSIONS_DIR": "", "RAY_get_check_signal_interval_milliseconds": "1",
                 "RAY_CGRAPH_get_timeout": "600", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
                 "JE_ARROW_MALLOC_CONF": "background_thread:false", "TORCHINDUCTOR_COMPILE_THREADS": "2",
                 "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "NCCL_CUMEM_ENABLE": "0",
                 "NCCL_NVLS_ENABLE": "0", "NVTE_BWD_LAYERNORM_SM_MARGIN": "0"}


def _roll_ray_init_runtime_env() -> dict[str, Any]:
    """What ROLL's init() passes to ray.init on a GPU node: ``{"env_vars": current_platform.get_custom_env_vars()}``,
    from ROLL's own code where it imports."""
    if importlib.util.find_spec("roll") is None:
        return {"env_vars": dict(CUDA_ENV_VARS)}
    from roll.platforms.cuda import CudaPlatform

    return {"env_vars": CudaPlatform.get_custom_env_vars()}


@pytest.mark.parametrize("name", ["shared", ODD])
def test_submitted_job_gives_every_worker_the_run_directory(tmp_path: Path, name: str) -> None:
    job = compile_job(tmp_path / "job")
    run_dir = tmp_path / name.format(tmp=tmp_path) / "run"  # absolute, on storage every node shares
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path,
                                            {"PYTHON": sys.executable, "RUN_DIR": str(run_dir)})
    assert job_env["working_dir"] == str(job.path) and f"RUN_DIR={run_dir}" in entrypoint
    assert job_env["env_vars"] == {"AGENTBRIDGE_RUN_DIR": str(run_dir)}
    init_env = _roll_ray_init_runtime_env()
    merged = merge_as_ray_init(job_env, init_env)  # Ray refuses the Job if a key were in both
    # every worker ROLL starts (its actors add their own env_vars, ROLL_LOG_DIR among them) sees the run directory
    assert merged["env_vars"] == {**init_env["env_vars"], "AGENTBRIDGE_RUN_DIR": str(run_dir)}
    assert merged["working_dir"] == str(job.path)
    assert not (tmp_path / "pwned").exists()
