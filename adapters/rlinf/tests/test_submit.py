"""submit.sh's Ray job carries the run format to every worker: its runtime env, through Ray's own merge with the one
RLinf's ``Cluster`` passes to ``ray.init`` (none, or ``py_modules`` when ``RLINF_CODE_WORKING_DIR`` ships RLinf's
package)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import HAS_RLINF, compile_job

from agentbridge.testing import merge_as_ray_init, ray_job_submitted

# the replay parses the recorded `ray job submit` with Ray's own CLI code and merges with Ray's own code
pytest.importorskip("ray.dashboard.modules.dashboard_sdk", reason="Ray is not installed here")

# a run directory whose name the shell must keep as data: a quote, a backslash, a command substitution
ODD = 'sh"ar\\ed $(touch {tmp}/pwned) `touch {tmp}/pwned`'


def _rlinf_ray_init_runtime_envs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any] | None]:
    """The runtime envs RLinf 0.3.0's Cluster gives ray.init: none by default; with code sync on, its
    ``py_modules`` fragment (from RLinf's own code where it imports; the same shape elsewhere)."""
    if not HAS_RLINF:
        return [None, {"py_modules": ["/opt/rlinf/rlinf"]}]
    import rlinf
    from rlinf.scheduler.cluster.cluster import Cluster

    monkeypatch.setenv("RLINF_CODE_WORKING_DIR", "0")
    off, _ = Cluster._prepare_ray_code_sync_runtime_env_fragment()
    monkeypatch.setenv("RLINF_CODE_WORKING_DIR", str(Path(rlinf.__file__).parent))
    synced, _ = Cluster._prepare_ray_code_sync_runtime_env_fragment()
    assert off is None and synced is not None and set(synced) == {"py_modules"}
    return [off, synced]


@pytest.mark.parametrize("name", ["shared", ODD])
def test_submitted_job_gives_every_worker_the_run_directory(tmp_path: Path, name: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    job = compile_job(tmp_path / "job")
    run_dir = tmp_path / name.format(tmp=tmp_path) / "run"  # absolute, on storage every node shares
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path,
                                            {"PYTHON": sys.executable, "RUN_DIR": str(run_dir)})
    assert job_env["working_dir"] == str(job.path) and f"RUN_DIR={run_dir}" in entrypoint
    assert job_env["env_vars"] == {"AGENTBRIDGE_RUN_DIR": str(run_dir)}
    for init_env in _rlinf_ray_init_runtime_envs(monkeypatch):
        merged = merge_as_ray_init(job_env, init_env)  # Ray refuses the Job if a key were in both
        # every worker RLinf starts (its workers add their own env_vars) sees the run directory
        assert merged["env_vars"] == {"AGENTBRIDGE_RUN_DIR": str(run_dir)}
        assert merged["working_dir"] == str(job.path)
        assert merged.get("py_modules") == (init_env or {}).get("py_modules")
    assert not (tmp_path / "pwned").exists()
