"""The recipe through veRL: each knob in veRL's own key of the compiled job, a job with the knobs passing veRL's
validators, the recipe rows of the algorithm conformance (veRL's ``core_algos``, ``apply_kl_penalty`` and rollout
correction as the compiled job configures them) equal to the reference, and the knobs veRL cannot run refused in one
line naming who can."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLE, SMALL, compile_job

from agentbridge.adapter import flatten
from agentbridge.backends import compile_job as checked_compile
from agentbridge.conformance.algorithms import RECIPE_CASES, problem_lines, run_algorithms
from agentbridge.spec import load_spec
from agentbridge_verl.backend import VerlBackend
from agentbridge_verl.validate import validate_job

RECIPE = ["model.lora.rank=16", "model.lora.target_modules=[q_proj,v_proj]", "algorithm.clip.high=0.28",
          "algorithm.scale_advantages=none", "algorithm.epochs=2", "algorithm.mini_batches=2"]
ACTOR, RC, V1 = "actor_rollout_ref.actor.", "algorithm.rollout_correction.", "trainer.v1."


def _keys(job: Any) -> dict[str, Any]:
    return flatten(yaml.safe_load((job.path / "agentbridge_job.yaml").read_text()))


def test_a_recipe_job_passes_verls_validators(tmp_path: Path) -> None:
    backend = VerlBackend()
    job = checked_compile(load_spec(EXAMPLE, [*SMALL, *RECIPE]), backend, tmp_path / "job")
    keys = _keys(job)
    assert keys["actor_rollout_ref.model.lora_rank"] == 16 and keys["actor_rollout_ref.model.lora_alpha"] == 32.0
    assert keys["actor_rollout_ref.model.target_modules"] == ["q_proj", "v_proj"]
    assert keys[ACTOR + "clip_ratio_high"] == 0.28
    assert keys["algorithm.norm_adv_by_std_in_grpo"] is False
    assert keys[ACTOR + "ppo_epochs"] == 2 and keys[ACTOR + "ppo_mini_batch_size"] == 1
    assert job.manifest["recipe"] == {"clip": {"low": None, "high": 0.28, "dual": None},
                                      "scale_advantages": "none", "epochs": 2, "mini_batches": 2}
    report = backend.validate(job)
    assert report.ok, report.problems
    assert any("lora_rank" in line for line in report.details.get("skipped", [])), report.details


def test_a_broken_lora_key_is_caught_by_verl(tmp_path: Path) -> None:
    backend = VerlBackend()
    job = checked_compile(load_spec(EXAMPLE, [*SMALL, *RECIPE]), backend, tmp_path / "job")
    config = yaml.safe_load((job.path / "agentbridge_job.yaml").read_text())
    config["actor_rollout_ref"]["model"]["lora_rnak"] = 16  # a key veRL's model config does not have
    (job.path / "agentbridge_job.yaml").write_text(yaml.safe_dump(config))
    report = backend.validate(job)
    assert not report.ok and any("lora_rnak" in str(p) for p in report.problems), report.problems


# knob settings -> the veRL keys they write (veRL 0.9.1's names: core_algos.kl_penalty_forward's "kl"/"mse"/
# "low_var_kl", AlgoConfig.kl_ctrl, RolloutCorrectionConfig, trainer.v1.trainer_mode and its sampler)
NATIVE: list[tuple[list[str], dict[str, Any]]] = [
    (["algorithm.kl_coef=0.05", "algorithm.kl_estimator=k1"],
     {ACTOR + "use_kl_loss": True, ACTOR + "kl_loss_type": "kl", ACTOR + "kl_loss_coef": 0.05,
      "algorithm.use_kl_in_reward": False}),
    (["algorithm.kl_coef=10", "algorithm.kl_estimator=k2"],
     {ACTOR + "use_kl_loss": True, ACTOR + "kl_loss_type": "mse"}),
    (["algorithm.kl_coef=0.05", "algorithm.kl_estimator=k3"], {ACTOR + "kl_loss_type": "low_var_kl"}),
    (["algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k1"],
     {"algorithm.use_kl_in_reward": True, "algorithm.kl_penalty": "kl", "algorithm.kl_ctrl.type": "fixed",
      "algorithm.kl_ctrl.kl_coef": 0.05, ACTOR + "use_kl_loss": False}),
    # kl_in alone: the preset's estimator (grpo: k3) in the reward
    (["algorithm.kl_coef=0.05", "algorithm.kl_in=reward"],
     {"algorithm.use_kl_in_reward": True, "algorithm.kl_penalty": "low_var_kl", ACTOR + "use_kl_loss": False}),
    (["algorithm.is_correction.level=token", "algorithm.is_correction.mode=truncate"],
     {RC + "rollout_is": "token", RC + "rollout_is_threshold": 2.0, RC + "rollout_rs": None,
      RC + "bypass_mode": False, RC + "rollout_is_batch_normalize": False}),
    (["algorithm.is_correction.level=sequence", "algorithm.is_correction.mode=truncate",
      "algorithm.is_correction.cap=3.5"], {RC + "rollout_is": "sequence", RC + "rollout_is_threshold": 3.5}),
    (["algorithm.is_correction.level=token", "algorithm.is_correction.mode=mask"],
     {RC + "rollout_is": "token", RC + "rollout_is_threshold": "1e-09_2.0"}),  # IcePop: zero outside [1e-9, 2]
    (["algorithm.is_correction.level=sequence", "algorithm.is_correction.mode=mask"],
     {RC + "rollout_is": "sequence", RC + "rollout_is_threshold": "1e-09_2.0"}),
    (["algorithm.rollout.mode=sync"], {V1 + "trainer_mode": "sync"}),
    (["algorithm.rollout.mode=async", "algorithm.rollout.partial=true", "algorithm.rollout.max_staleness=2"],
     {V1 + "trainer_mode": "colocate_async", V1 + "sampler.max_off_policy_threshold": 3,
      V1 + "sampler.max_off_policy_strategy": "drop"}),
]


@pytest.mark.parametrize("sets, native", NATIVE, ids=[" ".join(s.split(".")[-1] for s in sets) for sets, _ in NATIVE])
def test_each_knob_writes_verls_own_setting(tmp_path: Path, sets: list[str], native: dict[str, Any]) -> None:
    job = checked_compile(load_spec(EXAMPLE, [*SMALL, "algorithm.name=grpo", *sets]), VerlBackend(), tmp_path / "j")
    keys = _keys(job)
    assert {k: keys.get(k, "<unset>") for k in native} == native


def test_knobs_left_null_write_nothing_new(small_job: Any) -> None:
    """A spec without the knobs compiles to the job it compiled to before they existed."""
    keys = _keys(small_job)
    assert not [k for k in keys if k.startswith((RC, V1, "algorithm.kl_penalty", "algorithm.kl_ctrl"))], keys
    assert keys[ACTOR + "kl_loss_type"] == "low_var_kl" and keys["algorithm.use_kl_in_reward"] is False


def test_a_job_with_the_new_knobs_passes_verls_validators_and_says_what_it_does(tmp_path: Path) -> None:
    from agentbridge.compare.semantics import shared

    job = compile_job(tmp_path / "job", "algorithm.name=grpo", "algorithm.kl_coef=0.05", "algorithm.kl_in=reward",
                      "algorithm.kl_estimator=k2", "algorithm.is_correction.level=sequence",
                      "algorithm.is_correction.mode=mask", "algorithm.is_correction.cap=3",
                      "algorithm.rollout.mode=async", "algorithm.rollout.partial=true",
                      "algorithm.rollout.max_staleness=2")
    semantics: dict[str, str] = {}
    assert validate_job(job.path, [], semantics=semantics) == []
    assert shared(semantics["KL"]) == "k2 in the reward, coef 0.05"
    assert shared(semantics["IS correction"]) == "sequence mask, cap 3"
    assert shared(semantics["rollout mode"]) == "async, max staleness 2, partial"
    plain: dict[str, str] = {}
    assert validate_job(compile_job(tmp_path / "plain", "algorithm.name=grpo").path, [], semantics=plain) == []
    assert (shared(plain["IS correction"]), shared(plain["rollout mode"])) == ("none", "sync")


def test_verl_catches_a_rollout_correction_it_would_skip_or_reject(tmp_path: Path) -> None:
    """veRL applies the correction only to a batch with the rollout's log-probs (skipping it without a word
    otherwise); a threshold its helper cannot parse is veRL's own one-line rejection."""
    isc = ["algorithm.name=grpo", "algorithm.is_correction.level=token"]
    no_logprobs = compile_job(tmp_path / "a", *isc,
                              "backend.overrides.actor_rollout_ref.rollout.calculate_log_probs=false")
    problems = validate_job(no_logprobs.path)
    assert [p.where for p in problems] == ["actor_rollout_ref.rollout.calculate_log_probs"], problems
    bad = compile_job(tmp_path / "b", *isc, "backend.overrides.algorithm.rollout_correction.rollout_is_threshold=two")
    problems = validate_job(bad.path)
    assert [str(p) for p in problems] == ["algorithm.rollout_correction: veRL rejects it: Invalid rollout_is_threshold "
                                          "'two'."]


def test_the_async_staleness_is_the_replay_buffers_version_span(tmp_path: Path) -> None:
    """max_staleness k: veRL's async replay buffer (the compiled job's sampler settings) trains a group whose prompt
    was sent k steps before the training step and drops one sent k + 1 before; the job's trainer mode names veRL's
    colocated async trainer (partial rollouts: its LLM client resumes cut generations)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import PPOTrainerColocateAsync, get_trainer_cls
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

    from agentbridge_verl.validate import compose_job

    job = compile_job(tmp_path / "job", "algorithm.name=grpo", "algorithm.rollout.mode=async",
                      "algorithm.rollout.partial=true", "algorithm.rollout.max_staleness=2")
    cfg = compose_job(job.path, load_spec(str(job.path / "spec.yaml")), "model")
    assert get_trainer_cls(cfg.trainer.v1.trainer_mode) is PPOTrainerColocateAsync
    sampler = cfg.trainer.v1.sampler
    buffer = ReplayBufferAsync(trainer_mode=cfg.trainer.v1.trainer_mode, trainer_config=OmegaConf.create({}),
                               max_off_policy_threshold=sampler.max_off_policy_threshold,
                               max_off_policy_strategy=sampler.max_off_policy_strategy,
                               sampler_kwargs=OmegaConf.create({}), refill_fn=lambda *_: None)
    step = 10
    buffer.prompt_global_steps["train"] = {f"lag{lag}": step - lag for lag in range(5)}
    buffer.finished_keys["train"] = set(buffer.prompt_global_steps["train"])
    assert buffer._stale_terminal_keys(step, "train") == {"lag3", "lag4"}


@pytest.mark.parametrize("field, value, why", [
    ("algorithm.rollout", "algorithm.rollout.mode=one_step_off", "verl.experimental.one_step_off_policy.main_ppo"),
    ("algorithm.rollout", "algorithm.rollout.mode=async", "set rollout.partial true"),
    ("algorithm.scale_advantages", "algorithm.scale_advantages=batch", "it has no batch std"),
])
def test_what_verl_cannot_run_is_refused_in_one_line_naming_who_can(field: str, value: str, why: str) -> None:
    problems = [str(p) for p in VerlBackend().check(load_spec(EXAMPLE, [*SMALL, "algorithm.name=grpo", value]))]
    assert len(problems) == 1 and problems[0].startswith(f"{field}: verl cannot run grpo with "), problems
    assert why in problems[0] and "\n" not in problems[0]
    # who can: the installed backends that do not refuse it; agentbridge's own environment has them all
    res = subprocess.run([".venv/bin/agentbridge", "validate", EXAMPLE, "--backend", "verl", "--set",
                          "algorithm.name=grpo", "--set", value], capture_output=True, text=True, timeout=120)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and f"{field}: verl cannot run grpo" in lines[0], res.stderr
    assert why in lines[0]
    named = re.search(r"; (?:backends that can: ([a-z_, ]+)|no installed backend can)$", lines[0])
    assert named is not None, lines[0]
    assert "verl" not in (named.group(1) or "").split(", ")


def test_an_async_rollout_needs_verls_v1_trainer(tmp_path: Path) -> None:
    sets = [*SMALL, "algorithm.name=grpo", "algorithm.rollout.mode=async", "algorithm.rollout.partial=true"]
    problems = VerlBackend().check(load_spec(EXAMPLE, [*sets, "backend.overrides.trainer.use_v1=false"]))
    assert [p.where for p in problems] == ["algorithm.rollout"] and "legacy trainer" in problems[0].message
    assert VerlBackend().check(load_spec(EXAMPLE, sets)) == []
    # set past the spec's checks (backend.overrides), veRL's legacy trainer would ignore the mode: validate says so
    legacy = compile_job(tmp_path / "legacy", "algorithm.name=grpo", "backend.overrides.trainer.use_v1=false",
                         "backend.overrides.trainer.v1.trainer_mode=colocate_async")
    assert [p.where for p in validate_job(legacy.path)] == ["trainer.v1.trainer_mode"]


def test_the_recipe_rows_equal_the_reference_or_are_refused() -> None:
    """Each recipe knob on grpo through veRL's own code as the compiled job configures it (KL estimators in the loss
    and the reward via apply_kl_penalty, the rollout correction with the batch's rollout_logp as veRL's
    rollout_log_probs): the reference, except advantage scaling by the batch's std, which veRL's check refuses."""
    cells = {c.algorithm.split("@")[1]: c for c in run_algorithms("verl", (), recipe=tuple(RECIPE_CASES))}
    assert list(cells) == list(RECIPE_CASES)
    assert {case for case, c in cells.items() if c.status not in ("✔", "≈")} == {"scale_batch"}, \
        problem_lines(list(cells.values()))
    assert cells["scale_batch"].status == "n/a" and cells["scale_batch"].why.startswith(
        "algorithm.scale_advantages: verl cannot run grpo with scale_advantages batch (")


def test_a_wrong_kl_or_is_mapping_fails_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows see the mapping: k1 written as veRL's low_var_kl fails both k1 rows (loss and reward); no rollout
    correction fails each IS row; an IcePop lower bound that bites (0.5: the golden batch has token weights
    exp(-0.9) = 0.41) fails the token mask row."""
    from agentbridge_verl import algorithms, config

    cases = ("kl_k1", "kl_in_reward", "is_token_mask")

    def broken() -> dict[str, list[str]]:
        cells = run_algorithms("verl", (), recipe=cases)
        return {c.algorithm.split("@")[1]: c.unexpected() for c in cells if c.status == "✘"}

    monkeypatch.setitem(algorithms.KL_PENALTIES, "k1", "low_var_kl")
    assert broken() == {"kl_k1": ["kl"], "kl_in_reward": ["advantages"]}
    monkeypatch.undo()
    monkeypatch.setattr(config, "IS_MASK_FLOOR", 0.5)
    assert broken() == {"is_token_mask": ["loss"]}
    monkeypatch.setattr(config, "is_correction_settings", lambda spec: {})
    cells = run_algorithms("verl", (), recipe=("is_token_truncate", "is_sequence_truncate", "is_sequence_mask"))
    assert [(c.status, c.unexpected()) for c in cells] == [("✘", ["loss"])] * 3
