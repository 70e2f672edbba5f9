"""The recipe rows ROLL's validator reads from its ``AgenticConfig`` (``entropy_loss_coef``, ``max_grad_norm``,
``ppo_epochs`` and the actor's batch, ``actor_train.model_args.lora_*``) in the shared words of
``agentbridge.compare.semantics``, and the train-infer correction metrics ROLL's own helper computes written under the
shared names of ``agentbridge.runs.IS_METRIC_NAMES``."""

from __future__ import annotations

from pathlib import Path

import pytest
from roll_helpers import compile_job, needs_roll

from agentbridge.compare.semantics import (
    batch_words,
    entropy_words,
    grad_clip_words,
    lora_words,
    overlong_words,
    shared,
)
from agentbridge.runs import IS_METRIC_NAMES
from agentbridge.training.phases import step_row
from agentbridge_roll.run_metrics import NORMALIZED

KNOBS = ["model.lora.rank=16", "model.lora.target_modules=[v_proj,q_proj]", "model.lora.dropout=0.05",
         "algorithm.entropy_coef=0.01", "algorithm.max_grad_norm=0.5", "algorithm.overlong.mask_truncated=true",
         "algorithm.overlong.buffer=16", "algorithm.epochs=2", "algorithm.mini_batches=2"]
ROWS = ("entropy bonus", "overlong", "grad clip", "batch", "LoRA")


def test_rolls_table_maps_onto_the_shared_is_names() -> None:
    assert {v for v in NORMALIZED.values() if v.startswith("is/")} == \
        {"is/ratio_mean", "is/capped_fraction"} <= set(IS_METRIC_NAMES)


@needs_roll
def test_rolls_recipe_rows_carry_the_specs_values(tmp_path: Path) -> None:
    from agentbridge_roll.validate import validate_job

    semantics: dict[str, str] = {}
    assert validate_job(compile_job(tmp_path / "job", *KNOBS).path, [], semantics=semantics) == []
    assert list(semantics) == list(ROWS)  # the recipe aspects (ROLL's validator reports no others yet)
    assert shared(semantics["LoRA"]) == lora_words(16, 32, ["q_proj", "v_proj"], 0.05)
    assert shared(semantics["entropy bonus"]) == entropy_words(0.01)
    assert shared(semantics["grad clip"]) == grad_clip_words(0.5)
    assert shared(semantics["overlong"]) == overlong_words(True, 16, 1.0)
    assert shared(semantics["batch"]) == batch_words(2, 4, 2, 2)
    plain: dict[str, str] = {}
    assert validate_job(compile_job(tmp_path / "plain").path, [], semantics=plain) == []
    assert [shared(plain[a]) for a in ROWS] == ["none", "none", "max norm 1", batch_words(2, 4, 1, 1),
                                                "full fine-tuning"]


@needs_roll
@pytest.mark.parametrize("mode", ["truncate", "mask"])
def test_rolls_train_infer_metrics_reach_the_shared_names(mode: str, tmp_path: Path) -> None:
    """ROLL's ``compute_train_infer_correction`` with the ``train_infer_correction`` the compiled job configures, on a
    small batch, its ``@sum`` reducer tags stripped as ROLL's tracker strips them: the raw ratio's mean is
    ``is/ratio_mean``; truncation's clipped share ``is/capped_fraction`` (the mask filter logs its pass rate only:
    not converted)."""
    import torch
    from roll.utils.tracking import _strip_metric_tag
    from roll.utils.train_infer_corrections import compute_train_infer_correction

    from agentbridge_roll.validate import build_config, compose_job

    job = compile_job(tmp_path / "job", "algorithm.is_correction.level=token", f"algorithm.is_correction.mode={mode}")
    config = build_config(compose_job(job.path, "model"))
    old = torch.tensor([[-0.1, -0.5, -0.5], [-1.0, -0.2, -0.3]])
    infer = torch.tensor([[-0.3, -2.2, -0.5], [-1.1, -0.2, -0.3]])
    _, _, metrics = compute_train_infer_correction(config.train_infer_correction, torch.ones(2, 3), old, infer)
    row = step_row(1, _strip_metric_tag(metrics), NORMALIZED, "roll")
    shared_names = {name for name in row if name.startswith("is/")}
    assert shared_names == ({"is/ratio_mean", "is/capped_fraction"} if mode == "truncate" else {"is/ratio_mean"})
    assert row["is/ratio_mean"] == pytest.approx(float((old - infer).exp().mean()))
    if mode == "truncate":
        assert row["is/capped_fraction"] == pytest.approx(1 / 6)  # exp(1.7) above the cap of 2
