"""resources' sizing fields on veRL: each lands in veRL's own keys of the compiled Hydra config (the actor's, the
log-prob passes' and, with PPO, the critic's), is the default of its ``backend.options`` twin, passes veRL's
validators, and reaches the memory estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import EXAMPLE, SMALL, compile_job

from agentbridge.adapter import flatten
from agentbridge.backends import compile_job as checked_compile
from agentbridge.memory import estimate_job
from agentbridge.spec import load_spec
from agentbridge.spec.sizing import option_conflicts
from agentbridge_verl.backend import VerlBackend
from agentbridge_verl.config import SIZING_OPTIONS

SIZED = ["resources.micro_batch_size=2", "resources.gradient_checkpointing=false", "resources.save_steps=7",
         "resources.save_total_limit=3"]
ARR = "actor_rollout_ref."
KEYS = (ARR + "actor.ppo_micro_batch_size_per_gpu", ARR + "rollout.log_prob_micro_batch_size_per_gpu",
        ARR + "ref.log_prob_micro_batch_size_per_gpu", ARR + "model.enable_gradient_checkpointing", "trainer.save_freq",
        "trainer.max_actor_ckpt_to_keep", "critic.ppo_micro_batch_size_per_gpu",
        "critic.model.enable_gradient_checkpointing", "trainer.max_critic_ckpt_to_keep")


def _keys(tmp_path: Path, *sets: str) -> dict[str, Any]:
    keys = flatten(yaml.safe_load((compile_job(tmp_path / "job", *sets).path / "agentbridge_job.yaml").read_text()))
    return {k: keys.get(k) for k in KEYS}


def test_the_fields_are_verls_own_keys(tmp_path: Path) -> None:
    assert list(_keys(tmp_path / "set", *SIZED).values()) == [2, 2, 2, False, 7, 3, None, None, None]
    # PPO: the critic's micro-batch, recompute and retention too
    assert list(_keys(tmp_path / "ppo", *SIZED, "algorithm.name=ppo").values()) == [2, 2, 2, False, 7, 3, 2, False, 3]
    # unset: the adapter's options (micro-batch 1, a checkpoint every 100 steps) and veRL's defaults for the rest
    assert list(_keys(tmp_path / "unset").values()) == [1, 1, 1, None, 100, None, None, None, None]


def test_an_option_decides_alone_and_one_that_disagrees_with_its_field_is_refused(tmp_path: Path) -> None:
    keys = _keys(tmp_path, *SIZED[1:], "backend.options={micro_batch_size_per_gpu: 4}")
    assert keys[ARR + "actor.ppo_micro_batch_size_per_gpu"] == 4 and keys["trainer.save_freq"] == 7
    spec = load_spec(EXAMPLE, [*SMALL, *SIZED, "backend.options={micro_batch_size_per_gpu: 4}"])
    assert list(option_conflicts(spec, "verl", SIZING_OPTIONS)) == ["backend.options.micro_batch_size_per_gpu"]
    assert [str(p) for p in VerlBackend().check(spec)] == [
        "backend.options.micro_batch_size_per_gpu: resources.micro_batch_size (2) sets it too, to another value: "
        "remove the option or make the two agree"]


def test_a_sized_job_passes_verls_validators(tmp_path: Path) -> None:
    backend = VerlBackend()
    job = checked_compile(load_spec(EXAMPLE, [*SMALL, *SIZED]), backend, tmp_path / "job")
    report = backend.validate(job)
    assert report.ok, report.problems


def test_the_memory_estimate_reads_them(tmp_path: Path) -> None:
    sets = ["data.train.size=64", "data.eval.size=8", "data.dev.size=8", "resources.micro_batch_size=8",
            "resources.gradient_checkpointing=false"]
    spec = load_spec("examples/calculator.gpu.yaml", sets)
    VerlBackend().compile(spec, tmp_path / "job")
    memory = estimate_job(spec, "verl", tmp_path / "job")
    assert (memory["micro_batch"], memory["recompute"]) == (8, False)


def test_a_one_gpu_job_offloads_the_actor_and_the_reference() -> None:
    from agentbridge_verl.config import trainer_settings

    def spec(gpus: int, *sets: str) -> Any:
        return load_spec("examples/calculator.gpu.yaml", ["resources.nodes=1", f"resources.gpus_per_node={gpus}",
                                                          "backend.name=verl", "backend.options={}", *sets])

    actor = "actor_rollout_ref.actor.fsdp_config."
    one = trainer_settings(spec(1, "algorithm.kl_coef=0.001"))
    assert one[actor + "param_offload"] is True and one[actor + "optimizer_offload"] is True
    assert one["actor_rollout_ref.ref.fsdp_config.param_offload"] is True
    assert not any(k.endswith("_offload") for k in trainer_settings(spec(8)))  # FSDP shards over 8 GPUs
    assert not any(k.endswith("_offload") for k in trainer_settings(spec(0)))  # a CPU job
