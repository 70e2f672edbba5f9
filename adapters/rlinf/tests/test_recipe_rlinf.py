"""The recipe's KL, IS-correction and rollout-mode knobs on RLinf 0.3.0: each mapped knob is RLinf's own key in the
compiled Hydra config (RLinf's validator accepts the job where RLinf imports), each refused one is one line naming
the installed backends that can (the recipe rows themselves: test_algorithm_conformance_rlinf.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLE, ROOT, SMALL, compile_job, needs_rlinf

from agentbridge.spec import load_spec
from agentbridge.testing import assert_refusal_names_who_can
from agentbridge_rlinf.backend import RlinfBackend

GRPO = ["algorithm.name=grpo"]


def _algorithm(tmp_path: Path, *sets: str) -> dict[str, Any]:
    """The compiled job's ``algorithm`` section (the spec passes RLinf's check first)."""
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *sets])
    assert RlinfBackend().check(spec) == [], [str(p) for p in RlinfBackend().check(spec)]
    job = compile_job(tmp_path / "job", *sets)
    return dict(yaml.safe_load((job.path / "rlinf_job.yaml").read_text())["algorithm"])


@pytest.mark.parametrize(("sets", "want"), [
    # grpo: KL in the actor's loss (kl_beta) with the estimator as kl_penalty_type; k3 is the preset's low_var_kl
    ([*GRPO, "algorithm.kl_coef=10", "algorithm.kl_estimator=k2"],
     {"kl_penalty_type": "k2", "kl_beta": 10.0, "reinpp_kl_beta": 0.0}),
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k3", "algorithm.kl_in=loss"],
     {"kl_penalty_type": "low_var_kl", "kl_beta": 0.05, "reinpp_kl_beta": 0.0}),
    # the Megatron actor passes kl_penalty its arguments in order: k1 in the loss is k1 there
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k1", "backend.options.training_backend=megatron"],
     {"kl_penalty_type": "k1", "kl_beta": 0.05, "reinpp_kl_beta": 0.0}),
    # reinforce_pp: the estimator in reinpp's token rewards (reinpp_kl_beta), or k2 / k3 in the loss instead
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k2"],
     {"kl_penalty_type": "k2", "kl_beta": 0.0, "reinpp_kl_beta": 0.05}),
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_in=loss", "algorithm.kl_estimator=k3"],
     {"kl_penalty_type": "low_var_kl", "kl_beta": 0.05, "reinpp_kl_beta": 0.0}),
    # both null: the presets' keys, as before the knobs existed
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05"],
     {"kl_penalty_type": "kl", "kl_beta": 0.0, "reinpp_kl_beta": 0.05}),
])
def test_kl_knobs_set_rlinfs_keys(sets: list[str], want: dict[str, Any], tmp_path: Path) -> None:
    algorithm = _algorithm(tmp_path, *sets)
    assert {k: algorithm.get(k, 0.0) for k in want} == want
    # RLinf computes the reference's log-probs only in the actor's recompute pass (AgentRunner runs run_inference
    # only with recompute_logprobs): a job with KL on turns it on
    assert algorithm["recompute_logprobs"] is True


def test_no_kl_no_correction_keeps_the_engines_logprobs(tmp_path: Path) -> None:
    algorithm = _algorithm(tmp_path, *GRPO)
    assert algorithm["recompute_logprobs"] is False and "importance_sampling_fix" not in algorithm


def test_token_truncate_is_rlinfs_importance_sampling_fix(tmp_path: Path) -> None:
    algorithm = _algorithm(tmp_path, *GRPO, "algorithm.is_correction.level=token",
                           "algorithm.is_correction.mode=truncate", "algorithm.is_correction.cap=3")
    assert algorithm["importance_sampling_fix"] is True and algorithm["importance_sampling_clip"] == 3.0
    assert algorithm["recompute_logprobs"] is True


def test_rollout_sync_is_rlinfs_own(tmp_path: Path) -> None:
    """Explicitly synchronous: RLinf's AgentRunner as it is (nothing refused, nothing set)."""
    assert _algorithm(tmp_path, *GRPO, "algorithm.rollout.mode=sync") == _algorithm(tmp_path / "plain", *GRPO)


@pytest.mark.parametrize(("sets", "field", "why"), [
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_in=reward"], "algorithm.kl_in",
     "its grpo advantage takes no KL"),
    (["algorithm.name=dapo", "algorithm.kl_coef=0.05", "algorithm.kl_in=reward", "algorithm.kl_estimator=k2"],
     "algorithm.kl_in", "reinpp_kl_beta, read by compute_reinpp_advantages alone"),
    ([*GRPO, "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k1"], "algorithm.kl_estimator",
     "kl_penalty(ref_logprobs, logprobs, 'k1'), which is ref - logp"),
    # reinforce_pp's preset estimator is k1: moved to the loss it would be the FSDP actor's negated k1
    (["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_in=loss"], "algorithm.kl_in",
     "the k1 estimate negated"),
    ([*GRPO, "algorithm.is_correction.level=token", "algorithm.is_correction.mode=mask"], "algorithm.is_correction",
     "importance_sampling_fix is per token and truncates"),
    ([*GRPO, "algorithm.is_correction.level=sequence"], "algorithm.is_correction", "no sequence level"),
    ([*GRPO, "algorithm.is_correction.level=sequence", "algorithm.is_correction.mode=mask"],
     "algorithm.is_correction", "no sequence level, no mask"),
    ([*GRPO, "algorithm.rollout.mode=one_step_off"], "algorithm.rollout", "AgentRunner, which runs agent loops"),
    ([*GRPO, "algorithm.rollout.mode=async", "algorithm.rollout.max_staleness=2"], "algorithm.rollout",
     "AsyncPPOEmbodiedRunner"),
    ([*GRPO, "algorithm.rollout.mode=async", "algorithm.rollout.partial=true"], "algorithm.rollout",
     "generates and trains in turn"),
])
def test_a_refused_knob_is_one_line_naming_who_can(sets: list[str], field: str, why: str) -> None:
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *sets])
    problems = [str(p) for p in RlinfBackend().check(spec)]
    assert len(problems) == 1, problems
    (line,) = problems
    assert line.startswith(f"{field}: rlinf cannot run {spec.algorithm.name} with ") and why in line, line
    assert_refusal_names_who_can(line, field, spec, "rlinf")


@needs_rlinf
@pytest.mark.parametrize("sets", [
    [*GRPO, "algorithm.kl_coef=10", "algorithm.kl_estimator=k2"],
    ["algorithm.name=reinforce_pp", "algorithm.kl_coef=0.05", "algorithm.kl_estimator=k3"],
    [*GRPO, "algorithm.is_correction.level=token", "algorithm.is_correction.cap=3"],
])
def test_rlinfs_validator_accepts_the_recipe_jobs(sets: list[str], tmp_path: Path) -> None:
    """RLinf's validate_reasoning_cfg and its registries accept each mapped job (the keys are RLinf's: a misspelt
    kl_penalty_type would fail kl_penalty at the first step, not here; the algorithm probe runs it)."""
    from rlinf.config import validate_reasoning_cfg

    from agentbridge_rlinf.validate import compose_job

    job = compile_job(tmp_path / "job", *sets)
    report = RlinfBackend().validate(job)
    assert report.ok, [str(p) for p in report.problems]
    cfg = validate_reasoning_cfg(compose_job(job.path, "MODEL"))
    if "algorithm.is_correction.level=token" in sets:
        assert cfg.algorithm.recompute_logprobs and cfg.rollout.return_logprobs
        assert cfg.algorithm.importance_sampling_clip == 3.0


@needs_rlinf
def test_the_agent_loop_keeps_the_engines_logprobs_for_the_is_fix(tmp_path: Path) -> None:
    """The golden episodes through RLinf's agent-loop path (agentbridge's worker on local Ray, the stand-in engine):
    with KL on, recompute_logprobs makes RLinf's AgentLoopWorker drop the engine's log-probs; with the IS fix, which
    weighs exactly those against the recomputed ones, agentbridge's worker keeps them in the actor batch."""
    from transformers import AutoTokenizer

    from agentbridge_rlinf.conformance import golden_config, records_of, rollout_results

    def logprobs(*sets: str) -> list[Any]:
        cfg, _ = golden_config("text", tmp_path / str(len(sets)), sets)
        assert cfg.algorithm.recompute_logprobs
        tokenizer = AutoTokenizer.from_pretrained(str(cfg.rollout.model.model_path))
        records = records_of(rollout_results(cfg, tokenizer), cfg, int(tokenizer.eos_token_id))
        return [r.logprobs for r in records]

    assert all(lp is None for lp in logprobs("algorithm.kl_coef=0.05"))
    kept = logprobs("algorithm.is_correction.level=token", "algorithm.is_correction.cap=3")
    assert kept and all(lp for lp in kept)
