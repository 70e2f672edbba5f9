"""validate: the compiled example passes veRL 0.9.1's own checks; broken variants fail with one clear line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import compile_job

from agentbridge.backends import Job
from agentbridge_verl.backend import VerlBackend
from agentbridge_verl.validate import validate_job


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentbridge.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_compiled_example_passes_validate(small_job: Job) -> None:
    report = VerlBackend().validate(small_job)
    assert report.ok, [str(p) for p in report.problems]


@pytest.mark.parametrize("sets, needle", [
    # 2 prompts x 4 samples = 8 sequences cannot be split over 16 GPUs
    (["resources.gpus_per_node=8", "resources.nodes=2"], "validate_config rejects it: real_train_batch_size (8) "
                                                         "must be divisible by minimal possible batch size (16)"),
    (["backend.overrides.actor_rollout_ref.rollout.fmt=hermes"],
     "actor_rollout_ref.rollout.fmt: 'actor_rollout_ref.rollout.fmt' is not a veRL 0.9.1 config key"),
    (["backend.overrides.algorithm.adv_estimator=magic"], "algorithm.adv_estimator: veRL 0.9.1 has no such estimator"),
    (["backend.overrides.custom_reward_function.path=/tmp/r.py"],
     "custom_reward_function.path: legacy key that veRL 0.9.1's main_ppo ignores; use reward.custom_reward_function"),
])
def test_broken_jobs_fail_with_one_line(tmp_path: Path, sets: list[str], needle: str) -> None:
    problems = [str(p) for p in validate_job(compile_job(tmp_path / "job", *sets).path)]
    assert len(problems) == 1, problems
    assert needle in problems[0], problems


def test_check_cli_prints_one_error_line(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job", "backend.overrides.algorithm.adv_estimator=magic")
    res = cli("check", str(job.path))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no such estimator" in lines[0], lines


def test_validate_from_another_interpreter_without_verl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The main environment has no veRL: validate runs this adapter's validator in the veRL interpreter."""
    job = compile_job(tmp_path / "job", "backend.overrides.algorithm.adv_estimator=magic")
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    monkeypatch.delenv("AGENTBRIDGE_VERL_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)  # no .venv-verl here either
    monkeypatch.setenv("AGENTBRIDGE_HOME", str(tmp_path))  # and none recorded by `agentbridge backends setup`
    report = VerlBackend().validate(job)
    assert not report.ok and "set AGENTBRIDGE_VERL_PYTHON" in str(report.problems[0])
    monkeypatch.setenv("AGENTBRIDGE_VERL_PYTHON", sys.executable)
    report = VerlBackend().validate(job)
    assert [p.where for p in report.problems] == ["algorithm.adv_estimator"]


@pytest.mark.parametrize("version, needle", [
    (None, "veRL's V1 trainer needs TransferQueue, which is not installed (main_ppo would stop with \"No module "
           "named 'transfer_queue'\")"),
    ("0.1.9", "veRL's V1 trainer needs TransferQueue>=0.1.10, 0.1.9 is installed"),
])
def test_the_default_v1_trainer_needs_transfer_queue(small_job: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     version: str | None, needle: str) -> None:
    """The job keeps veRL's default trainer (V1), which cannot start without TransferQueue; the legacy one can."""
    import agentbridge_verl.validate as validate

    monkeypatch.setattr(validate, "transfer_queue_version", lambda: version)
    problems = validate_job(small_job.path)  # the example's dapo: its dynamic sampling is the V1 trainer's
    assert [(p.where, needle in p.message) for p in problems] == [("trainer.use_v1", True)], problems
    assert problems[0].message.endswith("DAPO's dynamic sampling needs the V1 trainer")
    grpo = validate_job(compile_job(tmp_path / "grpo", "algorithm.name=grpo").path)
    assert [(p.where, needle in p.message) for p in grpo] == [("trainer.use_v1", True)], grpo
    assert "backend.overrides {trainer: {use_v1: false}}" in grpo[0].message
    legacy = compile_job(tmp_path / "job", "algorithm.name=grpo", "backend.overrides.trainer.use_v1=false")
    assert validate_job(legacy.path) == []


def test_a_hub_id_job_is_validated_as_far_as_no_model_files_allow(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The job a GPU user writes (a hub id this machine has not got): veRL's config checks run, the model's are
    skipped, and each skipped check is said."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    job = compile_job(tmp_path / "job", "model.path=Qwen/Qwen2.5-0.5B-Instruct")
    skipped: list[str] = []
    assert validate_job(job.path, skipped) == []
    assert skipped[0].startswith("model.path Qwen/Qwen2.5-0.5B-Instruct: not on this machine")
    assert any(line.startswith("actor_rollout_ref.model:") for line in skipped)
    gpu: list[str] = []  # a job for GPUs: flash-attn, which veRL's actor uses, is in the GPU environment only
    assert validate_job(compile_job(tmp_path / "gpu", "model.path=Qwen/Qwen2.5-0.5B-Instruct",
                                    "resources.gpus_per_node=1").path, gpu) == []
    assert [line for line in gpu if "flash" in line] == [
        "actor_rollout_ref.model.override_config.attn_implementation: flash_attention_2 needs flash-attn, not in this "
        "CPU environment (`agentbridge backends setup verl --gpu` installs it)"]
    assert not [line for line in skipped if "flash" in line]  # a CPU spec
    broken = compile_job(tmp_path / "broken", "model.path=Qwen/Qwen2.5-0.5B-Instruct", "algorithm.group_size=1")
    assert validate_job(broken.path, [])  # the checks that need no model still find problems


def test_validate_says_what_the_job_will_do_from_the_composed_config(small_job: Job) -> None:
    from agentbridge.compare.semantics import ASPECTS, shared

    semantics: dict[str, str] = {}
    assert validate_job(small_job.path, [], semantics=semantics) == []
    assert list(semantics) == list(ASPECTS)
    assert shared(semantics["advantage"]) == "r - group mean, / group std"
    assert shared(semantics["clip"]) == "(0.2, 0.28) on token ratios"  # the example's dapo
    assert shared(semantics["optimizer"]) == "lr 0.0001, constant after warmup"
