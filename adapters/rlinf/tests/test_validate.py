"""validate: RLinf's own validator (``validate_reasoning_cfg``) on compiled jobs, in the RLinf environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, compile_job, needs_rlinf

from agentbridge.backends import Job
from agentbridge_rlinf.backend import RlinfBackend

pytestmark = needs_rlinf


def test_a_compiled_job_passes_rlinfs_validator(small_job: Job) -> None:
    report = RlinfBackend().validate(small_job)
    assert report.ok, report.problems
    assert any("validate_cfg" in s for s in report.details.get("skipped", []))


def test_rlinf_rejects_what_its_validator_rejects(tmp_path: Path) -> None:
    backend = RlinfBackend()
    short = compile_job(tmp_path / "short", "backend.overrides={runner.seq_length: 100}")
    (line,) = [str(p) for p in backend.validate(short).problems]
    assert line.startswith("rlinf_job.yaml: RLinf's validate_reasoning_cfg rejects it: runner.seq_length (100) must "
                           "be greater than data.max_prompt_length")
    model = compile_job(tmp_path / "model", "backend.options.model_type=llama-foo")
    (line,) = [str(p) for p in backend.validate(model).problems]
    assert "Model Type: llama-foo not supported" in line
    logprobs = compile_job(tmp_path / "logprobs", "backend.overrides={rollout.return_logprobs: false}")
    (line,) = [str(p) for p in backend.validate(logprobs).problems]
    assert "One of `algorithm.recompute_logprobs` or `rollout.return_logprobs` must be True" in line
    adv = compile_job(tmp_path / "adv", "backend.overrides={algorithm.adv_type: dr_grpo}")
    (line,) = [str(p) for p in backend.validate(adv).problems]
    assert line.startswith("algorithm.adv_type: RLinf registers no advantage 'dr_grpo' (it has gae, grpo")


def test_the_validator_runs_as_a_command_with_the_json_protocol(small_job: Job) -> None:
    out = subprocess.run([sys.executable, "-m", "agentbridge_rlinf.validate", str(small_job.path), "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and verdict["problems"] == [] and verdict["skipped"]


def test_a_compiled_job_passes_rlinfs_whole_validate_cfg(small_job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the job's entry runs first on the cluster: RLinf's ``validate_cfg`` with its cluster and placement (a
    local Ray here, shared with the conformance tests: RLinf's ``Cluster`` is one per process)."""
    from rlinf.config import validate_cfg

    from agentbridge.models import resolve_model_path
    from agentbridge.spec import load_spec
    from agentbridge_rlinf.validate import compose_job

    monkeypatch.setenv("RAY_ADDRESS", "local")  # never join another Ray running on the machine
    spec = load_spec(small_job.path / "spec.yaml")
    cfg = validate_cfg(compose_job(small_job.path, str(resolve_model_path(spec.model.path))))
    assert cfg.actor.training_backend == "fsdp" and cfg.cluster.num_nodes == 1
    assert cfg.actor.global_batch_size == spec.algorithm.batch_size * spec.algorithm.group_size
