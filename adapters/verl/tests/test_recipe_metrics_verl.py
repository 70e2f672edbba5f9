"""The recipe rows veRL's validator reads from its composed config (``actor_rollout_ref.model.lora_*``,
``actor.entropy_coeff``, ``actor.optim.clip_grad``, ``ppo_epochs`` / ``ppo_mini_batch_size``) in the shared words of
``agentbridge.compare.semantics``, and the rollout-correction metrics veRL's own helper computes written under the
shared names of ``agentbridge.runs.IS_METRIC_NAMES``."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compile_job

from agentbridge.compare.semantics import (
    ASPECTS,
    batch_words,
    entropy_words,
    grad_clip_words,
    lora_words,
    overlong_words,
    shared,
)
from agentbridge.runs import IS_METRIC_NAMES
from agentbridge_verl.run_metrics import NORMALIZED, normalize
from agentbridge_verl.validate import validate_job

KNOBS = ["model.lora.rank=16", "model.lora.target_modules=[v_proj,q_proj]", "algorithm.entropy_coef=0.01",
         "algorithm.max_grad_norm=0.5", "algorithm.overlong.mask_truncated=true", "algorithm.overlong.buffer=16",
         "algorithm.epochs=2", "algorithm.mini_batches=2"]


def test_verls_recipe_rows_carry_the_specs_values(tmp_path: Path) -> None:
    semantics: dict[str, str] = {}
    assert validate_job(compile_job(tmp_path / "job", *KNOBS).path, [], semantics=semantics) == []
    assert list(semantics) == list(ASPECTS)
    assert shared(semantics["LoRA"]) == lora_words(16, 32, ["q_proj", "v_proj"])
    assert shared(semantics["entropy bonus"]) == entropy_words(0.01)
    assert shared(semantics["grad clip"]) == grad_clip_words(0.5)
    assert semantics["grad clip"].endswith("· actor.optim.clip_grad 0.5")  # what 0.9.1's engine clips with
    assert shared(semantics["overlong"]) == overlong_words(True, 16, 1.0)
    assert shared(semantics["batch"]) == batch_words(2, 4, 2, 2)
    plain: dict[str, str] = {}
    assert validate_job(compile_job(tmp_path / "plain").path, [], semantics=plain) == []
    assert [shared(plain[a]) for a in ("LoRA", "entropy bonus", "grad clip", "overlong", "batch")] == \
        ["full fine-tuning", "none", "max norm 1", "none", batch_words(2, 4, 1, 1)]


@pytest.mark.parametrize("threshold", [2.0, "0.5_2.0"])  # TIS (truncate) and IcePop (mask)
def test_verls_rollout_correction_metrics_reach_the_shared_names(threshold: float | str) -> None:
    """veRL's ``compute_rollout_correction_and_rejection_mask`` (what its trainer logs with
    ``algorithm.rollout_correction``) on a small batch: its ``rollout_corr/*`` names become ``is/*`` in the run's
    rows, with veRL's values."""
    import torch
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    old = torch.tensor([[-0.1, -0.5, -0.5], [-1.0, -0.2, -0.3]])
    rollout = torch.tensor([[-0.3, -2.2, -0.5], [-1.1, -0.2, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    _, _, metrics = compute_rollout_correction_and_rejection_mask(old, rollout, mask, rollout_is="token",
                                                                  rollout_is_threshold=threshold)
    assert set(NORMALIZED) & set(metrics) == {k for k, v in NORMALIZED.items() if v.startswith("is/")}
    row = normalize(3, metrics)
    shared_names = {name for name in row if name.startswith("is/")}
    assert shared_names == {"is/weight_mean", "is/capped_fraction", "is/mismatch_kl"} <= set(IS_METRIC_NAMES)
    assert row["is/mismatch_kl"] == pytest.approx(float(((rollout - old) * mask).sum() / mask.sum()))
    # one of the five tokens has exp(old - rollout) = e^1.7 above the cap of 2
    assert row["is/capped_fraction"] == pytest.approx(0.2)
    assert row["is/weight_mean"] == metrics["rollout_corr/rollout_is_mean"]
    assert "verl/rollout_corr/rollout_is_mean" not in row and "verl/rollout_corr/rollout_is_max" in row
