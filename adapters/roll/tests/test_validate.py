"""validate: ROLL's own config classes (``AgenticConfig`` via ``dacite``) on compiled jobs, where ROLL imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from roll_helpers import ROOT, compile_job, needs_roll

from agentbridge.backends import Job
from agentbridge_roll.backend import RollBackend

pytestmark = needs_roll


def test_a_compiled_job_passes_rolls_config(small_job: Job) -> None:
    report = RollBackend().validate(small_job)
    assert report.ok, report.problems
    assert any("AgenticPipeline" in s for s in report.details.get("skipped", []))


@pytest.mark.parametrize("algo", ["grpo", "dr_grpo", "reinforce_pp", "ppo"])
def test_each_algorithm_builds_rolls_config(tmp_path: Path, algo: str) -> None:
    report = RollBackend().validate(compile_job(tmp_path / "job", f"algorithm.name={algo}", "algorithm.kl_coef=0.05"))
    assert report.ok, report.problems


def test_roll_rejects_what_its_config_rejects(tmp_path: Path) -> None:
    backend = RollBackend()
    cases = {
        "adv": ("backend.overrides={adv_estimator: rloo}", "ROLL's AgenticConfig rejects it: "),
        "batch": ("backend.overrides={rollout_batch_size: 6}", "rollout_batch_size (6) must be a multiple of "
                                                               "train_env_manager.group_size (4)"),
        "proxy": ("backend.overrides={train_env_manager: {llm_proxy: {proxy_type: nope}}}",
                  "train_env_manager.llm_proxy.proxy_type: ROLL registers no proxy 'nope' (it has "),
        "messages": ("backend.overrides={train_env_manager: {llm_proxy: {proxy_type: openai}}}",
                     "train_env_manager.llm_proxy.proxy_type: 'openai' does not generate from token ids"),
        "manager": ("backend.overrides={custom_envs: {agentbridge: {env_manager_cls: no.such.Manager}}}",
                    "custom_envs.agentbridge.env_manager_cls: 'no.such.Manager' does not import here"),
        "length": ("backend.overrides={sequence_length: 100}", "sequence_length: a backend length of 100 tokens"),
    }
    for name, (override, expected) in cases.items():
        (line,) = [str(p) for p in backend.validate(compile_job(tmp_path / name, override)).problems]
        assert expected in line and "\n" not in line, (name, line)
    (line,) = [str(p) for p in backend.validate(compile_job(tmp_path / "adv2", cases["adv"][0])).problems]
    assert "adv_estimator" in line


def test_the_validator_runs_as_a_command_with_the_json_protocol(small_job: Job) -> None:
    out = subprocess.run([sys.executable, "-m", "agentbridge_roll.validate", str(small_job.path), "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and verdict["problems"] == [] and verdict["skipped"]


def test_the_entry_builds_rolls_pipeline_config_from_launch_sh_arguments(small_job: Job,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What the job's ``entry.py`` hands ROLL's ``AgenticPipeline`` (not started here: it places workers on GPUs)."""
    import roll.distributed.scheduler.initialize as initialize
    import roll.pipeline.agentic.agentic_pipeline as pipeline

    from agentbridge_roll.config import path_overrides
    from agentbridge_roll.entry import main

    built: list[object] = []

    class Pipeline:
        def __init__(self, pipeline_config: object) -> None:
            built.append(pipeline_config)

        def run(self) -> None:
            built.append("run")

    monkeypatch.setattr(initialize, "init", lambda: built.append("init"))
    monkeypatch.setattr(pipeline, "AgenticPipeline", Pipeline)
    job = str(small_job.path.resolve())
    main(["--config-path", job, "--config-name", "roll_job", *path_overrides(job, "/models/m", has_eval=True),
          "output_dir=/runs/r"])
    config = built[1]
    assert built[0] == "init" and built[2] == "run" and type(config).__name__ == "AgenticConfig"
    assert config.pretrain == "/models/m" and config.output_dir == "/runs/r"  # type: ignore[attr-defined]
    env = config.train_env_manager.env_configs[0][0]  # type: ignore[attr-defined]
    assert env["env_manager_cls"] == "agentbridge_roll.rollout.AgentBridgeEnvManager"
    assert env["config"]["spec_path"] == f"{job}/spec.yaml" and env["config"]["data_path"] == f"{job}/data/train.jsonl"
