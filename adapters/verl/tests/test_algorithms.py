"""Algorithm mapping: every algorithm agentbridge promises for veRL composes into a config veRL accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compile_job

from agentbridge.models import resolve_model_path
from agentbridge.spec import load_spec
from agentbridge_verl.backend import VerlBackend
from agentbridge_verl.validate import compose_job, validate_job

EXPECTED = {  # name -> (adv_estimator, policy loss, loss_agg_mode, norm by std, critic)
    "grpo": ("grpo", "vanilla", "seq-mean-token-mean", True, False),
    "dr_grpo": ("grpo", "vanilla", "seq-mean-token-sum-norm", False, False),
    "dapo": ("grpo", "vanilla", "token-mean", True, False),
    "gspo": ("grpo", "gspo", "seq-mean-token-mean", True, False),
    "rloo": ("rloo", "vanilla", "seq-mean-token-sum", True, False),
    "reinforce_pp": ("reinforce_plus_plus", "vanilla", "token-mean", True, False),
    "ppo": ("gae", "vanilla", "token-mean", True, True),
}


def test_capabilities_are_the_mapped_algorithms() -> None:
    assert VerlBackend().capabilities().algorithms == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_algorithm_composes_into_verls_config(name: str, tmp_path: Path) -> None:
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.utils import need_critic

    job = compile_job(tmp_path / "job", f"algorithm.name={name}")
    cfg = compose_job(job.path, load_spec(job.path / "spec.yaml"), str(resolve_model_path("builtin:tiny")))
    estimator, loss_mode, agg, norm, critic = EXPECTED[name]
    actor = cfg.actor_rollout_ref.actor
    assert cfg.algorithm.adv_estimator == estimator and core_algos.get_adv_estimator_fn(estimator)
    assert actor.policy_loss.loss_mode == loss_mode and core_algos.get_policy_loss_fn(loss_mode)
    assert actor.loss_agg_mode == agg and cfg.algorithm.norm_adv_by_std_in_grpo == norm
    assert need_critic(cfg) == critic
    if name == "dapo":
        assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    if name == "ppo":
        assert cfg.critic.model.path == str(resolve_model_path("builtin:tiny"))


@pytest.mark.parametrize("name", ["ppo", "gspo"])
def test_critic_and_sequence_level_jobs_pass_validate(name: str, tmp_path: Path) -> None:
    assert [str(p) for p in validate_job(compile_job(tmp_path / "job", f"algorithm.name={name}").path)] == []


def test_dapo_on_the_legacy_trainer_is_refused(tmp_path: Path) -> None:
    """DAPO's group filtering lives in the V1 trainer's replay buffer; the legacy trainer ignores it."""
    job = compile_job(tmp_path / "job", "algorithm.name=dapo", "backend.name=verl",
                      "backend.overrides={trainer: {use_v1: false}}")
    assert [str(p) for p in validate_job(job.path)] == [
        "trainer.use_v1: algorithm.filter_groups (DAPO's dynamic sampling) runs in veRL's V1 trainer only; the "
        "legacy trainer would train on every group without a word"]
