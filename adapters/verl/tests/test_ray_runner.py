"""agentbridge's Ray job runner on a local Ray cluster: `agentbridge check` runs as a Ray job on the compiled job."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import compile_job

from agentbridge.command_runners import RayJobRunner, runner_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A one-node Ray cluster with the job server, started for this module and stopped with it (only it)."""
    port, dashboard = free_port(), free_port()
    temp = tmp_path_factory.mktemp("ray")
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--port", str(port),
           "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), "--include-dashboard", "true",
           "--num-cpus", "1", "--num-gpus", "0", "--disable-usage-stats", "--temp-dir", str(temp)]
    head = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + 120
        while True:
            try:
                JobSubmissionClient(address).list_jobs()
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline or head.poll() is not None:
                    pytest.fail(f"the local Ray cluster did not start (exit {head.poll()})")
                time.sleep(1)
        yield address
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:  # `ray start --block` outlives SIGTERM while its job server drains; its own group goes whole after 5 s
            head.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(10)


def test_check_runs_as_a_ray_job(ray_address: str, tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job")
    runner = RayJobRunner(ray_address, sys.executable, working_dir=job.path)
    result = runner.run(["check", "."])  # the job directory is the Ray job's working_dir
    assert result.ok, result.stdout[-2000:] + result.stderr[-2000:]
    assert "ok: . passes verl's validators" in result.stdout


def test_a_broken_job_fails_as_a_ray_job_with_its_one_line(ray_address: str, tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job")
    manifest = json.loads((job.path / "manifest.json").read_text())
    manifest["backend"] = "no-such-backend"
    (job.path / "manifest.json").write_text(json.dumps(manifest))
    result = RayJobRunner(ray_address, sys.executable, working_dir=job.path).run(["check", "."])
    assert not result.ok
    assert "error: --backend: " in result.stdout and "no-such-backend" in result.stdout


def test_runner_for_finds_this_environment() -> None:
    runner = runner_for("ray", backend="verl", module="verl", address="http://10.0.0.1:8265")
    assert isinstance(runner, RayJobRunner) and runner.python == sys.executable
    cmd = runner.submit_command(["check", "."])
    assert cmd[-5:] == [sys.executable, "-m", "agentbridge.cli", "check", "."]
    assert cmd[cmd.index("--address") + 1] == "http://10.0.0.1:8265"
