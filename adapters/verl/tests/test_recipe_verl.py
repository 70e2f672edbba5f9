"""The recipe through veRL's own validators: a job with LoRA, clip-higher, no std scaling, two epochs and two
mini-batches composes and passes ``validate_config`` and veRL's typed configs, with each knob in veRL's own key."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import EXAMPLE, SMALL

from agentbridge.adapter import flatten
from agentbridge.backends import compile_job
from agentbridge.spec import load_spec
from agentbridge_verl.backend import VerlBackend

RECIPE = ["model.lora.rank=16", "model.lora.target_modules=[q_proj,v_proj]", "algorithm.clip.high=0.28",
          "algorithm.scale_advantages=none", "algorithm.epochs=2", "algorithm.mini_batches=2"]


def test_a_recipe_job_passes_verls_validators(tmp_path: Path) -> None:
    backend = VerlBackend()
    job = compile_job(load_spec(EXAMPLE, [*SMALL, *RECIPE]), backend, tmp_path / "job")
    keys = flatten(yaml.safe_load((job.path / "agentbridge_job.yaml").read_text()))
    assert keys["actor_rollout_ref.model.lora_rank"] == 16 and keys["actor_rollout_ref.model.lora_alpha"] == 32.0
    assert keys["actor_rollout_ref.model.target_modules"] == ["q_proj", "v_proj"]
    assert keys["actor_rollout_ref.actor.clip_ratio_high"] == 0.28
    assert keys["algorithm.norm_adv_by_std_in_grpo"] is False
    assert keys["actor_rollout_ref.actor.ppo_epochs"] == 2 and keys["actor_rollout_ref.actor.ppo_mini_batch_size"] == 1
    assert job.manifest["recipe"] == {"clip": {"low": None, "high": 0.28, "dual": None},
                                      "scale_advantages": "none", "epochs": 2, "mini_batches": 2}
    report = backend.validate(job)
    assert report.ok, report.problems
    assert any("lora_rank" in line for line in report.details.get("skipped", [])), report.details


def test_a_broken_lora_key_is_caught_by_verl(tmp_path: Path) -> None:
    backend = VerlBackend()
    job = compile_job(load_spec(EXAMPLE, [*SMALL, *RECIPE]), backend, tmp_path / "job")
    config = yaml.safe_load((job.path / "agentbridge_job.yaml").read_text())
    config["actor_rollout_ref"]["model"]["lora_rnak"] = 16  # a key veRL's model config does not have
    (job.path / "agentbridge_job.yaml").write_text(yaml.safe_dump(config))
    report = backend.validate(job)
    assert not report.ok and any("lora_rnak" in str(p) for p in report.problems), report.problems
