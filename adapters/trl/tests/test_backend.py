"""Compile, validate and capability checks of the TRL backend; bad specs fail with one line each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentbridge.backends import Job, known_capabilities
from agentbridge.spec import load_spec
from agentbridge_trl.backend import TrlBackend
from agentbridge_trl.config import grpo_config_kwargs


def compiled(tmp_path: Path, small: list[str], *sets: str) -> Job:
    """The job with its manifest written, and no spec checks (so a broken job can be made)."""
    spec = load_spec("examples/calculator.yaml", [*small, *sets])
    job = TrlBackend().compile(spec, tmp_path / "job")
    job.write_manifest()
    return job


def test_compile_writes_a_self_contained_job(tmp_path: Path, small_sets: list[str]) -> None:
    job = compiled(tmp_path, small_sets)
    for name in ("manifest.json", "spec.yaml", "grpo_config.json", "launch.sh", "submit.sh", "data"):
        assert (job.path / name).exists(), name
    rows = (job.path / "data" / "train.jsonl").read_text().splitlines()
    assert len(rows) == 32 and json.loads(rows[0])["data"]["answer"]
    manifest = json.loads((job.path / "manifest.json").read_text())
    assert manifest["backend"] == "trl" and len(manifest["spec_hash"]) == 64 and manifest["seed"] == 0
    assert "agentbridge_trl.entry" in (job.path / "launch.sh").read_text()
    submit = (job.path / "submit.sh").read_text()
    assert "accelerate launch" in submit and "--num_machines" in submit


def test_validate_passes_for_the_example(tmp_path: Path, small_sets: list[str]) -> None:
    report = TrlBackend().validate(compiled(tmp_path, small_sets))
    assert report.ok, [str(p) for p in report.problems]


@pytest.mark.parametrize("name, loss", [("grpo", "grpo"), ("dr_grpo", "dr_grpo"), ("dapo", "dapo"), ("gspo", "grpo")])
def test_algorithm_mapping_builds_a_grpo_config(name: str, loss: str, tmp_path: Path) -> None:
    from trl import GRPOConfig

    spec = load_spec("examples/calculator.yaml", [f"algorithm.name={name}"])
    config = GRPOConfig(**grpo_config_kwargs(spec, str(tmp_path)))
    assert config.loss_type == loss and config.num_generations == 4 and config.per_device_train_batch_size == 32
    assert config.reward_weights == [1.0, 0.1, 1.0]
    if name == "gspo":
        assert config.importance_sampling_level == "sequence"
    if name == "dr_grpo":
        assert config.scale_rewards == "none"


def test_checkpointing_argument_takes_the_name_of_the_installed_transformers(tmp_path: Path) -> None:
    """transformers before the rename (5.15-5.17) has only ``gradient_checkpointing``; the job's
    ``activation_checkpointing`` reaches it under that name, and a current one keeps it as written."""
    import dataclasses

    from trl import GRPOConfig

    from agentbridge_trl.config import accepted_kwargs, make_grpo_config

    spec = load_spec("examples/calculator.yaml", ["backend.options={gradient_checkpointing: true}"])
    kwargs = grpo_config_kwargs(spec, str(tmp_path))
    assert kwargs["activation_checkpointing"] is True
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    before_rename = fields - {"activation_checkpointing", "activation_checkpointing_kwargs"}
    old = accepted_kwargs(kwargs, before_rename)
    assert "activation_checkpointing" not in old and old["gradient_checkpointing"] is True
    assert set(old) <= before_rename  # a GRPOConfig without the new names takes every argument
    assert accepted_kwargs(kwargs, fields) == kwargs
    assert make_grpo_config(old).gradient_checkpointing and make_grpo_config(kwargs).gradient_checkpointing


def test_ppo_is_refused_naming_the_backends_that_can() -> None:
    spec = load_spec("examples/calculator.yaml", ["algorithm.name=ppo"])
    (problem,) = TrlBackend().check(spec)
    assert str(problem).startswith("algorithm.name: trl cannot run 'ppo'")
    can = sorted(n for n, c in known_capabilities().items() if "ppo" in c.algorithms and n != "trl")
    assert {"openrlhf", "verl"} <= set(can)  # and slime, roll: every backend agentbridge knows that runs ppo
    assert f"backends that can: {', '.join(can)}" in str(problem) and "critic" in str(problem)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentbridge.cli", *args], capture_output=True, text=True,
                          timeout=600)


def test_validate_cli_one_line_for_ppo() -> None:
    res = cli("validate", "examples/calculator.yaml", "--backend", "trl", "--set", "algorithm.name=ppo")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "backends that can: openrlhf, " in res.stderr


@pytest.mark.parametrize("sets, needle", [
    (["model.path=/nonexistent/model"], "model.path: '/nonexistent/model' is not a local model"),
    (["backend.overrides.num_generations=3"], "GRPOConfig rejects it"),
    (["backend.options.turbo=true"], "backend.options.turbo: unknown TRL option"),
])
def test_broken_jobs_fail_check_with_one_line(tmp_path: Path, small_sets: list[str], sets: list[str],
                                              needle: str) -> None:
    job = compiled(tmp_path, small_sets, *sets)
    res = cli("check", str(job.path))
    assert res.returncode == 1, res.stdout
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert any(needle in line for line in lines), lines
    assert all(line.startswith("error: ") for line in lines)


def test_template_that_cannot_render_tool_calls_fails_before_training(tmp_path: Path) -> None:
    plain = tmp_path / "plain.jinja"
    plain.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    res = cli("train", "examples/calculator.yaml", "--set", f"model.chat_template={plain}", "-o", str(tmp_path / "r"))
    assert res.returncode == 1 and "does not render tool calls" in res.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_unknown_backend_is_one_line(tmp_path: Path) -> Any:
    res = cli("compile", "examples/calculator.yaml", "--backend", "nemo")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and "unknown backend 'nemo'" in res.stderr


def test_another_backends_options_are_noted_not_applied(tmp_path: Path, small_sets: list[str]) -> None:
    """One spec compiles for every backend: options meant for veRL are left out of the TRL job, with a note."""
    foreign = load_spec("examples/calculator.yaml", [*small_sets, "backend.name=verl",
                                                     "backend.options={rollout_n_gpus: 2}",
                                                     "backend.overrides={trainer.total_epochs: 3}"])
    backend = TrlBackend()
    assert backend.check(foreign) == []
    job = backend.compile(foreign, tmp_path / "job")
    assert job.manifest["notes"] == ["backend.options and backend.overrides are for backend verl (backend.name): "
                                     "not applied to the TRL job"]
    config = json.loads((job.path / "grpo_config.json").read_text())
    assert "trainer.total_epochs" not in config
    own = load_spec("examples/calculator.yaml", [*small_sets, "backend.options={rollout_n_gpus: 2}"])
    assert [p.where for p in backend.check(own)] == ["backend.options.rollout_n_gpus"]


def test_a_hub_id_job_is_validated_as_far_as_no_model_files_allow(tmp_path: Path, small_sets: list[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The job a GPU user writes (a hub id this machine has not got) passes check, saying what it skipped."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_spec("examples/calculator.yaml", [*small_sets, "model.path=Qwen/Qwen2.5-0.5B-Instruct"])
    job = TrlBackend().compile(spec, tmp_path / "job")
    report = TrlBackend().validate(job)
    assert report.ok, [str(p) for p in report.problems]
    assert report.details["skipped"][0].startswith("model.path Qwen/Qwen2.5-0.5B-Instruct: not on this machine")


def test_validate_says_what_the_job_will_do_from_the_grpo_config(tmp_path: Path, small_sets: list[str]) -> None:
    from agentbridge.compare.semantics import ASPECTS, shared

    job = TrlBackend().compile(load_spec("examples/calculator.yaml", small_sets), tmp_path / "job")
    semantics = TrlBackend().validate(job).details["semantics"]
    assert list(semantics) == list(ASPECTS)
    assert shared(semantics["clip"]) == "(0.2, 0.28) on token ratios"  # dapo's clip-higher
    assert shared(semantics["loss aggregation"]) == "token-mean" and semantics["KL"] == "none"


def test_a_gpu_job_is_validated_as_such_on_a_cpu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/calculator.gpu.yaml (bf16, a 2x8 cluster, micro-batches): GRPOConfig is built as on a bf16 GPU, so
    the rest of the GPU configuration is checked here; the precision is said to be unchecked."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_spec("examples/calculator.gpu.yaml", ["data.train.size=64", "data.eval.size=8"])
    assert TrlBackend().check(spec) == []
    report = TrlBackend().validate(TrlBackend().compile(spec, tmp_path / "job"))
    assert report.ok, [str(p) for p in report.problems]
    assert "bf16: no bf16 GPU here; GRPOConfig was checked as on one (the device is not)" in report.details["skipped"]
    config = json.loads((tmp_path / "job" / "grpo_config.json").read_text())
    assert config["bf16"] and (config["per_device_train_batch_size"], config["gradient_accumulation_steps"]) == (4, 8)
    broken = load_spec("examples/calculator.gpu.yaml", ["data.train.size=64", "data.eval.size=8",
                                                        "backend.overrides={fp16: true}"])
    problems = [str(p) for p in TrlBackend().validate(TrlBackend().compile(broken, tmp_path / "broken")).problems]
    assert len(problems) == 1 and problems[0].startswith("grpo_config.json: GRPOConfig rejects it"), problems


def test_a_zero3_gpu_job_gets_deepspeeds_config_finished_as_the_trainer_will(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU profile's ``zero_stage: 3``: the job carries TRL's ZeRO-3 recipe; validate builds it with DeepSpeed
    and finishes it as the trainer does (micro-batch and accumulation from GRPOConfig); a config that disagrees
    with GRPOConfig is one line; ZeRO on a CPU spec or an unknown stage is refused at check."""
    pytest.importorskip("deepspeed")  # scripts/test.sh installs it (the check needs no GPU)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sets = ["data.train.size=64", "data.eval.size=8"]
    spec = load_spec("examples/calculator.gpu.yaml", sets)
    report = TrlBackend().validate(TrlBackend().compile(spec, tmp_path / "job"))
    assert report.ok, [str(p) for p in report.problems]
    assert not [s for s in report.details["skipped"] if "not installed" in s]
    ds = json.loads((tmp_path / "job" / "grpo_config.json").read_text())["deepspeed"]
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3 and zero["stage3_gather_16bit_weights_on_model_save"]

    mismatch = load_spec("examples/calculator.gpu.yaml", [*sets, "backend.overrides={deepspeed: {zero_optimization: "
                                                          "{stage: 2}, train_micro_batch_size_per_gpu: 8}}"])
    problems = [str(p) for p in TrlBackend().validate(TrlBackend().compile(mismatch, tmp_path / "bad")).problems]
    assert len(problems) == 1 and "train_micro_batch_size_per_gpu" in problems[0], problems

    def zero_problems(*extra: str) -> list[str]:
        s = load_spec("examples/calculator.yaml", ["backend.name=trl", *extra])
        return [str(p) for p in TrlBackend().check(s) if p.where == "backend.options.zero_stage"]

    assert zero_problems("backend.options={zero_stage: 2}", "resources.gpus_per_node=8") == []
    assert "DeepSpeed needs GPUs" in zero_problems("backend.options={zero_stage: 3}")[0]
    assert "must be one of 1, 2, 3" in zero_problems("backend.options={zero_stage: 4}", "resources.gpus_per_node=8")[0]
    cpu_job = grpo_config_kwargs(load_spec("examples/calculator.yaml", ["backend.name=trl"]), "out")
    assert "deepspeed" not in cpu_job
