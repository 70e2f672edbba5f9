"""validate: OpenRLHF 0.11.2's own parser and post-parse checks on the job's command line, plus agentbridge's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentbridge.backends import Job
from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import OpenRLHFBackend


def _validate(job: Path) -> list[str]:
    return [str(p) for p in OpenRLHFBackend().validate(Job(backend="openrlhf", path=job)).problems]


def test_compiled_calculator_passes(calculator_job: Path) -> None:
    assert _validate(calculator_job) == []


def test_cli_check_passes_and_prints_ok(calculator_job: Path) -> None:
    cli = Path(sys.executable).with_name("agentbridge")
    result = subprocess.run([str(cli), "check", str(calculator_job)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ok: {calculator_job}")


@pytest.mark.parametrize(("edit", "expected"), [
    (("--train.agent_func_path", "--agent_func_path"), "unrecognized arguments: --agent_func_path"),
    (("--rollout.n_samples_per_prompt 4", "--rollout.n_samples_per_prompt 1"),
     "group_norm requires n_samples_per_prompt > 1"),
    (("--train.colocate_all", "--train.colocate_all\n  --train.async_enable"),
     "Async RLHF is not supported with --vllm.enable_sleep"),
    (("--rollout.max_new_tokens 48", "--rollout.max_new_tokens 600"),
     "rollout.max_new_tokens: 600 >= data.max_len 768 - longest prompt"),
    (("--data.max_len 768", "--data.max_len 700"), "data.max_len: 700 < agent.max_prompt_tokens"),
])
def test_broken_launch_line_fails_with_one_clear_line(calculator_job: Path, tmp_path: Path,
                                                      edit: tuple[str, str], expected: str) -> None:
    job = tmp_path / "job"
    shutil.copytree(calculator_job, job)
    launch = job / "launch.sh"
    text = launch.read_text()
    assert edit[0] in text
    launch.write_text(text.replace(edit[0], edit[1]))
    problems = _validate(job)
    assert len(problems) == 1 and expected in problems[0] and "\n" not in problems[0], problems


def test_cli_check_of_a_broken_job_prints_one_line_and_exits_1(calculator_job: Path, tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(calculator_job, job)
    launch = job / "launch.sh"
    launch.write_text(launch.read_text().replace("--train.agent_func_path", "--agent_func_path"))
    cli = Path(sys.executable).with_name("agentbridge")
    result = subprocess.run([str(cli), "check", str(job)], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        f"error: {job}: launch.sh: OpenRLHF 0.11.2 rejects the command line: unrecognized arguments: "
        f"--agent_func_path {job}/agentbridge_agent.py"]


def test_async_with_sleep_from_the_spec_is_rejected_by_openrlhf(tmp_path: Path) -> None:
    spec = load_spec("examples/calculator.yaml", ["backend.name=openrlhf", "backend.options={async: true}",
                                                  "backend.overrides={train.colocate_all: true, "
                                                  "vllm.enable_sleep: true}"])
    job = OpenRLHFBackend().compile(spec, tmp_path / "job")
    problems = _validate(job.path)
    assert problems == ["launch.sh: OpenRLHF 0.11.2 rejects the command line: Async RLHF is not supported with "
                        "--vllm.enable_sleep."]


def test_reward_model_flags_are_reported_as_ignored(calculator_job: Path, tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(calculator_job, job)
    launch = job / "launch.sh"
    launch.write_text(launch.read_text().replace("  --data.apply_chat_template\n", "  --data.apply_chat_template\n"
                                                 "  --reward.remote_url http://127.0.0.1:5000/get_reward\n"))
    assert _validate(job) == ["reward.remote_url: ignored in agent mode (OpenRLHF sets it to ['agent']); rewards "
                              "come from the spec's reward list"]


def test_an_image_budget_for_a_text_model_is_reported(tmp_path: Path) -> None:
    spec = load_spec("examples/calculator.yaml", ["backend.name=openrlhf",
                                                  "backend.overrides={data.max_images_per_prompt: 2}"])
    problems = _validate(OpenRLHFBackend().compile(spec, tmp_path / "job").path)
    assert len(problems) == 1 and problems[0].startswith("data.max_images_per_prompt: 2 images per prompt, but "
                                                         "OpenRLHF loads") and "as a text model" in problems[0]


def test_a_hub_id_job_is_validated_as_far_as_no_model_files_allow(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The job a GPU user writes (a hub id this machine has not got): OpenRLHF's parser runs, the checks that read
    the model's files are skipped and said."""
    from agentbridge_openrlhf.validate import validate_job

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_spec("examples/calculator.yaml", ["model.path=Qwen/Qwen2.5-0.5B-Instruct", "data.train.size=8",
                                                  "data.eval.size=4"])
    job = OpenRLHFBackend().compile(spec, tmp_path / "job")
    skipped: list[str] = []
    assert validate_job(job.path, skipped) == []
    assert skipped[0].startswith("model.path Qwen/Qwen2.5-0.5B-Instruct: not on this machine")


def test_validate_says_what_the_job_will_do_from_the_parsed_arguments(calculator_job: Path) -> None:
    from agentbridge.compare.semantics import ASPECTS, shared
    from agentbridge_openrlhf.validate import validate_job

    semantics: dict[str, str] = {}
    assert validate_job(calculator_job, [], semantics=semantics) == []
    assert list(semantics) == list(ASPECTS)
    assert shared(semantics["advantage"]) == "r - group mean, / group std"
    assert shared(semantics["clip"]) == "(0.2, 0.28) on token ratios"
    assert shared(semantics["IS correction"]) == "none" and shared(semantics["rollout mode"]) == "sync"
    # a constant learning rate after warmup, as TRL and veRL (OpenRLHF's default would decay it)
    assert shared(semantics["optimizer"]) == "lr 0.0001, constant after warmup"
