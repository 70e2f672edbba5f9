"""The recipe's KL, IS-correction and rollout-mode knobs on ROLL: each mapped knob is ROLL's own key in the compiled
config (ROLL's AgenticConfig accepts the job where ROLL imports), each refused one is one line naming the installed
backends that can (the recipe rows themselves: test_algorithms_roll.py). The specs are the golden text spec's (its
tasks need no plugin, so the tests run in ROLL's environment too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from roll_helpers import needs_roll

from agentbridge.backends import Job
from agentbridge.conformance.suite import golden_spec
from agentbridge.spec import Spec
from agentbridge.testing import assert_refusal_names_who_can
from agentbridge_roll.backend import RollBackend

GRPO = ["algorithm.name=grpo"]
TWO_GPUS = ["resources.gpus_per_node=2"]


def _spec(*sets: str) -> Spec:
    """The golden text spec on ROLL, groups of four, with ``sets``."""
    return golden_spec("text", ["backend.name=roll", "algorithm.group_size=4", *sets])


def _compile(out: Path, *sets: str) -> Job:
    """The spec with ``sets`` compiled for ROLL (it passes ROLL's check first)."""
    spec = _spec(*sets)
    assert RollBackend().check(spec) == [], [str(p) for p in RollBackend().check(spec)]
    return RollBackend().compile(spec, out)


def _config(tmp_path: Path, *sets: str) -> dict[str, Any]:
    """The compiled job's config."""
    return dict(yaml.safe_load((_compile(tmp_path / "job", *sets).path / "roll_job.yaml").read_text()))


# the KL keys and their defaults in ROLL's PPOConfig (roll/configs/base_config.py), for a key the job leaves out
KL_DEFAULTS = {"use_kl_loss": False, "kl_loss_coef": 0, "add_token_level_kl": False, "init_kl_coef": 0.2,
               "kl_penalty": "kl"}


@pytest.mark.parametrize(("sets", "want"), [
    # KL in the loss: ROLL's KL loss, k3 (its only estimator there)
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k3", "algorithm.kl_in=loss"],
     (True, 0.05, False, 0.0, "kl")),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_in=loss", "algorithm.kl_estimator=k3"],
     (True, 0.05, False, 0.0, "kl")),
    # KL in the reward: the token-reward penalty with the estimator as kl_penalty (k1 kl, k2 mse)
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k1"],
     (False, 0.0, True, 0.05, "kl")),
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k2"],
     (False, 0.0, True, 0.05, "mse")),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k2"],
     (False, 0.0, True, 0.05, "mse")),
    # both null: the presets' keys, as before the knobs existed
    ([*GRPO, "algorithm.kl_coef=0.05"], (True, 0.05, False, 0.0, "kl")),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05"], (False, 0.0, True, 0.05, "kl")),
])
def test_kl_knobs_set_rolls_keys(sets: list[str], want: tuple[Any, ...], tmp_path: Path) -> None:
    config = _config(tmp_path, *sets)
    assert tuple(config.get(k, default) for k, default in KL_DEFAULTS.items()) == want


@pytest.mark.parametrize(("level", "mode", "weight", "filters"), [
    ("token", "truncate", {"weight_type": "token", "upper_bound": 3.0}, []),
    ("sequence", "truncate", {"weight_type": "sequence", "upper_bound": 3.0}, []),
    ("token", "mask", {"weight_type": "token", "upper_bound": None},
     [{"agg_type": "token", "ratio_low": 0.0, "ratio_high": 3.0}]),
    ("sequence", "mask", {"weight_type": "sequence", "upper_bound": None},
     [{"agg_type": "sequence", "ratio_low": 0.0, "ratio_high": 3.0}]),
])
def test_is_correction_is_rolls_train_infer_correction(level: str, mode: str, weight: dict[str, Any],
                                                      filters: list[dict[str, Any]], tmp_path: Path) -> None:
    """truncate: the IS weight at the level clamped at cap; mask: the unbounded weight and a ratio filter keeping
    [0, cap] (a weight above cap leaves response_mask)."""
    config = _config(tmp_path, *GRPO, f"algorithm.is_correction.level={level}", f"algorithm.is_correction.mode={mode}",
                     "algorithm.is_correction.cap=3")
    correction = config["train_infer_correction"]
    assert correction["is_weight"] == {"enabled": True, "detach": True, **weight}
    assert [{k: f[k] for k in ("agg_type", "ratio_low", "ratio_high")} for f in correction["filters"]] == filters
    assert all(f["enabled"] and f["ratio_enabled"] and not f["diff_enabled"] for f in correction["filters"])


@pytest.mark.parametrize(("sets", "ratio"), [
    (["algorithm.rollout.mode=sync"], 0),
    (["algorithm.rollout.mode=one_step_off"], 1),
    (["algorithm.rollout.mode=async"], 1),
    (["algorithm.rollout.mode=async", "algorithm.rollout.max_staleness=3"], 3),
])
def test_rollout_mode_is_rolls_async_generation_ratio(sets: list[str], ratio: int, tmp_path: Path) -> None:
    """Generation ahead of training: async_generation_ratio is the staleness bound, and actor_infer gets GPUs of its
    own (the second half), the training workers the first half (their accumulation counts their GPUs only)."""
    config = _config(tmp_path, *GRPO, "resources.gpus_per_node=4", *sets)
    assert config["async_generation_ratio"] == ratio
    train, infer = ("list(range(0,2))", "list(range(2,4))") if ratio else ("list(range(0,4))",) * 2
    assert config["actor_train"]["device_mapping"] == config["reference"]["device_mapping"] == train
    assert config["actor_infer"]["device_mapping"] == infer
    algo = _spec(*GRPO).algorithm
    trajectories = algo.batch_size * algo.group_size  # one micro-batch of one trajectory per GPU
    assert config["actor_train"]["training_args"]["gradient_accumulation_steps"] == \
        max(1, trajectories // (2 if ratio else 4))


@pytest.mark.parametrize(("sets", "field", "why"), [
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k1"], "algorithm.kl_estimator",
     "kl_penalty='k3') whatever the config says"),
    ([*GRPO, "algorithm.kl_coef=10", "algorithm.kl_estimator=k2"], "algorithm.kl_estimator", "k3 only"),
    # reinforce_pp's preset estimator is k1: moved to the loss it is not ROLL's k3
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_in=loss"], "algorithm.kl_in", "k3 only"),
    # grpo's preset estimator is k3: moved to the reward it is not one of ROLL's kl_penalty choices
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_in=reward"], "algorithm.kl_in", "no k3"),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k3"],
     "algorithm.kl_estimator", "one of kl, abs, mse, full"),
    ([*GRPO, *TWO_GPUS, "algorithm.rollout.mode=async", "algorithm.rollout.partial=true"], "algorithm.rollout",
     "plays an aborted episode again from its start"),
    ([*GRPO, "algorithm.rollout.mode=one_step_off"], "algorithm.rollout", "2 or more GPUs"),
    ([*GRPO, "model.lora.rank=8", "model.lora.alpha=12.5"], "model.lora.alpha", "is an integer"),
])
def test_a_refused_knob_is_one_line_naming_who_can(sets: list[str], field: str, why: str) -> None:
    spec = _spec(*sets)
    problems = [str(p) for p in RollBackend().check(spec)]
    assert len(problems) == 1, problems
    (line,) = problems
    assert line.startswith(f"{field}: roll cannot run {spec.algorithm.name} with ") and why in line, line
    assert_refusal_names_who_can(line, field, spec, "roll")


def _golden_job(tmp_path: Path, *sets: str) -> Path:
    """The golden spec on ROLL's grpo with ``sets``, compiled."""
    return _compile(tmp_path / "job", *GRPO, *sets).path


@needs_roll
@pytest.mark.parametrize("sets", [
    ["algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k2"],
    ["algorithm.is_correction.level=sequence", "algorithm.is_correction.mode=mask"],
    [*TWO_GPUS, "algorithm.rollout.mode=async", "algorithm.rollout.max_staleness=2"],
])
def test_rolls_config_accepts_the_recipe_jobs(sets: list[str], tmp_path: Path) -> None:
    """ROLL's AgenticConfig (dacite's Literal checks and __post_init__) accepts each mapped job, with the values
    set."""
    from agentbridge_roll.validate import build_config, compose_job

    config = build_config(compose_job(_golden_job(tmp_path, *sets), "model"))
    if "algorithm.kl_in=reward" in sets:
        assert (config.add_token_level_kl, config.init_kl_coef, config.kl_penalty, config.use_kl_loss) == \
            (True, 0.05, "mse", False)
    if "algorithm.is_correction.mode=mask" in sets:
        correction = config.train_infer_correction
        assert correction.is_weight.enabled and correction.is_weight.weight_type == "sequence"
        assert correction.is_weight.upper_bound is None and correction.filters[0].ratio_high == 2.0
    if "algorithm.rollout.mode=async" in sets:
        assert config.async_generation_ratio == 2 and config.async_pipeline
        assert list(config.actor_infer.device_mapping) == [1] and list(config.actor_train.device_mapping) == [0]


@needs_roll
def test_k3_in_the_reward_is_not_a_roll_kl_penalty(tmp_path: Path) -> None:
    """Why k3 in the reward is refused: ROLL's AgenticConfig refuses kl_penalty k3 (a Literal of kl, abs, mse,
    full), though compute_approx_kl has a k3 branch."""
    from agentbridge_roll.validate import build_config, compose_job

    job = _golden_job(tmp_path, "algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k1")
    assert build_config(compose_job(job, "model")).kl_penalty == "kl"
    with pytest.raises(Exception, match="kl_penalty"):
        build_config(compose_job(job, "model", ["kl_penalty=k3"]))


@pytest.mark.parametrize(("sets", "note"), [
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k1"],
     "algorithm.kl_in reward on grpo: ROLL subtracts the KL from each token's reward after normalising"),
    ([*GRPO, "algorithm.is_correction.mode=mask"], "algorithm.is_correction mask: ROLL's ratio filter"),
    ([*GRPO, *TWO_GPUS, "algorithm.rollout.mode=one_step_off"],
     "algorithm.rollout one_step_off: ROLL's async pipeline, async_generation_ratio 1"),
])
def test_rolls_own_placements_are_noted_in_the_job(sets: list[str], note: str, tmp_path: Path) -> None:
    """Where ROLL's setting differs from the knob's reference (pinned in the algorithm probe's DIFFERENCES), the job
    says how, at the top of launch.sh and in its manifest."""
    job = _compile(tmp_path / "job", *sets)
    assert any(n.startswith(note) for n in job.manifest["notes"]), job.manifest["notes"]
    assert note in (job.path / "launch.sh").read_text().replace("\n# ", " ")
    plain = _compile(tmp_path / "plain", *GRPO)
    assert not any(n.startswith(note) for n in plain.manifest["notes"])


def test_lora_alpha_is_written_as_rolls_integer(tmp_path: Path) -> None:
    """ROLL's ModelArguments.lora_alpha is an int: the default (2 x rank) and a whole alpha are written as one."""
    args = _config(tmp_path, *GRPO, "model.lora.rank=8")["actor_train"]["model_args"]
    assert args["lora_alpha"] == 16 and isinstance(args["lora_alpha"], int) and args["lora_rank"] == 8
