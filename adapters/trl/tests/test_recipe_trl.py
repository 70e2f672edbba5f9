"""The KL, importance-sampling and rollout-mode knobs of the recipe on TRL: what reaches ``GRPOConfig`` under TRL
1.16's own names, what the check refuses in one line, the compile notes where TRL does not apply what the job
says, and that TRL's own code computes the importance-sampling weight only on a vLLM trainer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agentbridge.backends import Job
from agentbridge.spec import load_spec
from agentbridge_trl.backend import TrlBackend
from agentbridge_trl.config import IS_DEFAULTS, RECIPE_WHY_NOT, make_grpo_config

IS_KEYS = ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
           "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min")
VLLM = ["resources.gpus_per_node=1", "backend.options={use_vllm: true}"]


def compile_job(tmp_path: Path, small: list[str], *sets: str) -> Job:
    spec = load_spec("examples/calculator.yaml", [*small, *sets])
    assert TrlBackend().check(spec) == [], [str(p) for p in TrlBackend().check(spec)]
    return TrlBackend().compile(spec, tmp_path / "job")


def grpo_config(job: Job) -> dict[str, Any]:
    return dict(json.loads((job.path / "grpo_config.json").read_text()))


def is_notes(job: Job) -> list[str]:
    return [n for n in job.manifest["notes"] if n.startswith("algorithm.is_correction")]


@pytest.mark.parametrize("level, mode, cap", [("token", "truncate", 2.0), ("token", "mask", 2.0),
                                              ("sequence", "truncate", 2.0), ("sequence", "mask", 1.5)])
def test_is_correction_reaches_grpo_configs_own_settings(tmp_path: Path, small_sets: list[str], level: str,
                                                         mode: str, cap: float) -> None:
    job = compile_job(tmp_path, small_sets, f"algorithm.is_correction.level={level}",
                      f"algorithm.is_correction.mode={mode}", f"algorithm.is_correction.cap={cap}")
    kwargs = grpo_config(job)
    assert {k: kwargs[k] for k in IS_KEYS} == {
        "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": f"{level}_{mode}",
        "vllm_importance_sampling_clip_max": cap, "vllm_importance_sampling_clip_min": None}
    config = make_grpo_config({**kwargs, "output_dir": str(tmp_path / "out")})  # the installed TRL's names
    assert (config.vllm_importance_sampling_mode, config.vllm_importance_sampling_clip_max) == (f"{level}_{mode}", cap)
    assert config.vllm_importance_sampling_correction is True and config.vllm_importance_sampling_clip_min is None


def test_unset_is_correction_switches_trls_off(tmp_path: Path, small_sets: list[str]) -> None:
    config = grpo_config(compile_job(tmp_path, small_sets))
    assert {k: config[k] for k in IS_KEYS if k in config} == {"vllm_importance_sampling_correction": False}


def test_explicit_k3_in_the_loss_and_sync_rollouts_compile_as_the_preset(tmp_path: Path,
                                                                        small_sets: list[str]) -> None:
    preset = grpo_config(compile_job(tmp_path / "preset", small_sets, "algorithm.kl_coef=0.05"))
    explicit = grpo_config(compile_job(tmp_path / "explicit", small_sets, "algorithm.kl_coef=0.05",
                                       "algorithm.kl_estimator=k3", "algorithm.kl_in=loss",
                                       "algorithm.rollout.mode=sync"))
    assert explicit == preset
    assert explicit["beta"] == 0.05 and explicit["use_bias_correction_kl"] is False  # k3, unweighted, in the loss


def test_grpo_config_has_no_kl_estimator_nor_placement_option() -> None:
    """The refusals hold for the installed TRL: GRPOConfig's only KL settings are beta and the bias correction."""
    from trl import GRPOConfig

    kl = {f.name for f in dataclasses.fields(GRPOConfig) if "kl" in f.name.lower() or f.name == "beta"}
    assert kl == {"beta", "use_bias_correction_kl"}


@pytest.mark.parametrize("sets, field, word", [
    (("algorithm.kl_coef=0.05", "algorithm.kl_estimator=k1"), "algorithm.kl_estimator", "k3 in the loss"),
    (("algorithm.kl_coef=0.05", "algorithm.kl_estimator=k2"), "algorithm.kl_estimator", "k3 in the loss"),
    (("algorithm.kl_coef=0.05", "algorithm.kl_in=reward"), "algorithm.kl_in", "only in the loss"),
    (("algorithm.rollout.mode=one_step_off",), "algorithm.rollout", "synchronous"),
    (("algorithm.rollout.mode=async",), "algorithm.rollout", "synchronous"),
    (("algorithm.rollout.mode=async", "algorithm.rollout.partial=true"), "algorithm.rollout", "synchronous"),
])
def test_trl_refuses_what_it_cannot_run_in_one_line(small_sets: list[str], sets: tuple[str, ...], field: str,
                                                    word: str) -> None:
    spec = load_spec("examples/calculator.yaml", [*small_sets, *sets])
    lines = [str(p) for p in TrlBackend().check(spec)]
    assert len(lines) == 1 and lines[0].startswith(f"{field}: trl cannot run dapo"), lines
    assert word in lines[0] and "\n" not in lines[0]


def test_every_refusal_is_declared_against_a_recipe_key() -> None:
    assert RECIPE_WHY_NOT.keys() == {"kl_estimator", "kl_in", "rollout"}
    assert set(RECIPE_WHY_NOT["kl_estimator"]) == {"k1", "k2"} and set(RECIPE_WHY_NOT["kl_in"]) == {"reward"}
    assert set(RECIPE_WHY_NOT["rollout"]) == {"one_step_off", "async", "async+partial"}
    assert TrlBackend.recipe_why_not is RECIPE_WHY_NOT


def test_is_defaults_are_the_installed_grpo_configs() -> None:
    from trl import GRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert {k: defaults[k] for k in IS_DEFAULTS} == IS_DEFAULTS


def test_a_cpu_job_notes_that_trl_applies_no_is_correction(tmp_path: Path, small_sets: list[str]) -> None:
    job = compile_job(tmp_path / "is", small_sets, "algorithm.is_correction.level=token")
    [note] = is_notes(job)
    assert "token_truncate" in note and "only when it generates with vLLM" in note and "use_vllm false" in note
    assert note in (job.path / "launch.sh").read_text()
    assert is_notes(compile_job(tmp_path / "none", small_sets)) == []


def test_null_is_no_correction_on_a_vllm_job_too(tmp_path: Path, small_sets: list[str]) -> None:
    """``is_correction: null`` means none on every backend: TRL's own default (sequence_mask at 3.0 with vLLM) is
    switched off, and only an explicit value or a backend override turns it on."""
    default = compile_job(tmp_path / "default", small_sets, *VLLM)
    assert grpo_config(default)["vllm_importance_sampling_correction"] is False and is_notes(default) == []
    chosen = compile_job(tmp_path / "chosen", small_sets, *VLLM, "algorithm.is_correction.mode=mask")
    assert is_notes(chosen) == [] and grpo_config(chosen)["vllm_importance_sampling_mode"] == "token_mask"
    assert grpo_config(chosen)["vllm_importance_sampling_correction"] is True
    own = compile_job(tmp_path / "own", small_sets, *VLLM,
                      "backend.overrides={vllm_importance_sampling_correction: true}")
    assert grpo_config(own)["vllm_importance_sampling_correction"] is True


@pytest.mark.parametrize("case", ["is_token_mask", "is_sequence_truncate"])
def test_trl_weights_the_loss_only_on_a_vllm_trainer(tmp_path: Path, case: str) -> None:
    """TRL's own ``_generate_and_score_completions`` on the golden batch of a compiled IS job: no weight on the
    CPU job's trainer (what its compile note says); on a vLLM trainer, the reference's weights from the rollout's
    log-probs (what the probe feeds)."""
    import torch

    from agentbridge.conformance.algorithms import RECIPE_CASES, golden_algorithm_spec, golden_batch, is_weights
    from agentbridge_trl.algorithm_probe import job_trainer, score

    spec = golden_algorithm_spec("grpo", "trl", 0.0, RECIPE_CASES[case][1])
    job = TrlBackend().compile(spec, tmp_path / "job")
    assert not grpo_config(job)["use_vllm"] and is_notes(job)
    batch = golden_batch()
    t = batch.tensors()
    spec, _, trainer = job_trainer(job.path)
    trainer._get_per_token_logps_and_entropies = lambda *_, **__: (t["old_logp"], torch.zeros_like(t["old_logp"]),
                                                                   None)
    assert "importance_sampling_ratio" not in score(trainer, batch, spec)
    trainer.use_vllm = True
    ratio = score(trainer, batch, spec)["importance_sampling_ratio"]
    m = t["mask"].float()
    isc = spec.algorithm.is_correction
    want = is_weights(t, m, isc.level, isc.mode, isc.cap)
    assert torch.allclose(ratio.expand_as(m) * m, want * m, atol=1e-6)
    assert float((want * m).sum()) != pytest.approx(float(m.sum()))  # the weights are not all 1: the case bites


@pytest.mark.parametrize("sets, want", [
    ((), "none"),                                                                 # CPU: TRL corrects only vLLM's
    (("algorithm.is_correction.level=token",), "none"),
    (VLLM, "none"),                                                               # null: none, vLLM or not
    ((*VLLM, "algorithm.is_correction.level=token"), "token truncate, cap 2"),
    ((*VLLM, "algorithm.is_correction.level=sequence", "algorithm.is_correction.mode=mask",
      "algorithm.is_correction.cap=1.5"), "sequence mask, cap 1.5"),
    ((*VLLM, "backend.overrides={vllm_importance_sampling_correction: true}"), "sequence mask, cap 3"),
])
def test_semantics_say_what_trls_is_correction_does(tmp_path: Path, small_sets: list[str], sets: tuple[str, ...],
                                                   want: str) -> None:
    from agentbridge.compare.semantics import ASPECTS, shared
    from agentbridge_trl.validate import validate_job

    semantics: dict[str, str] = {}
    assert validate_job(compile_job(tmp_path, small_sets, *sets).path, [], semantics=semantics) == []
    assert list(semantics) == list(ASPECTS)
    assert shared(semantics["IS correction"]) == want and shared(semantics["rollout mode"]) == "sync"
