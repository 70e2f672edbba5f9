"""The recipe rows slime's validator reads from its parsed arguments (``--entropy-coef``, ``--clip-grad``,
``--global-batch-size``) in the shared words of ``agentbridge.compare.semantics``, and slime's importance-sampling
metrics (its TIS / IcePop functions, its MIS helper) written under the shared names of
``agentbridge.runs.IS_METRIC_NAMES``."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
from slime_testkit import compile_job, needs_slime

from agentbridge.compare.semantics import batch_words, entropy_words, grad_clip_words, overlong_words, shared
from agentbridge.runs import IS_METRIC_NAMES
from agentbridge.training.phases import step_row
from agentbridge_slime.backend import SlimeBackend
from agentbridge_slime.config import MIS
from agentbridge_slime.run_metrics import NORMALIZED

GRPO = ["algorithm.name=grpo"]
KNOBS = ["algorithm.entropy_coef=0.01", "algorithm.max_grad_norm=0.5", "algorithm.overlong.mask_truncated=true",
         "algorithm.overlong.buffer=16", "algorithm.mini_batches=2"]


def test_slimes_table_maps_onto_the_shared_is_names() -> None:
    assert {v for v in NORMALIZED.values() if v.startswith("is/")} == \
        {"is/ratio_mean", "is/capped_fraction", "is/mismatch_kl", "is/logp_abs_diff"} <= set(IS_METRIC_NAMES)


@needs_slime
def test_slimes_recipe_rows_carry_the_specs_values(tmp_path: Path) -> None:
    report = SlimeBackend().validate(compile_job(tmp_path / "job", *GRPO, *KNOBS))
    assert report.ok, [str(p) for p in report.problems]
    semantics = report.details["semantics"]
    assert shared(semantics["entropy bonus"]) == entropy_words(0.01)
    assert shared(semantics["grad clip"]) == grad_clip_words(0.5)
    assert semantics["grad clip"].endswith("· --clip-grad 0.5")
    assert shared(semantics["overlong"]) == overlong_words(True, 16, 1.0)
    assert shared(semantics["batch"]) == batch_words(2, 4, 1, 2)  # --global-batch-size 4 of the step's 8 samples
    assert shared(semantics["LoRA"]) == "full fine-tuning"  # model.lora is refused on slime
    plain = SlimeBackend().validate(compile_job(tmp_path / "plain", *GRPO)).details["semantics"]
    assert [shared(plain[a]) for a in ("entropy bonus", "grad clip", "overlong")] == ["none", "max norm 1", "none"]


@needs_slime
def test_slimes_tis_and_icepop_metrics_reach_the_shared_names() -> None:
    """``--use-tis`` (vanilla_tis_function) and IcePop report ``tis`` and ``tis_clipfrac``, policy_loss_function
    ``train_rollout_logprob_abs_diff``, logged as ``train/<key>`` (slime's loss module imports Megatron-LM: its
    source is read here)."""
    spec = importlib.util.find_spec("slime")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    loss = (package / "backends" / "megatron_utils" / "loss.py").read_text()
    assert loss.count('"tis": ') == 2 and loss.count('"tis_clipfrac": ') == 2  # TIS and IcePop
    assert 'reported_loss["train_rollout_logprob_abs_diff"]' in loss
    assert 'f"train/{role_tag}{key}"' in (package / "backends" / "megatron_utils" / "model.py").read_text()
    row = step_row(1, {"train/tis": 1.02, "train/tis_clipfrac": 0.1, "train/train_rollout_logprob_abs_diff": 0.03,
                       "train/ois": 1.0}, NORMALIZED, "slime")
    assert row == {"step": 1, "is/ratio_mean": 1.02, "is/capped_fraction": 0.1, "is/logp_abs_diff": 0.03,
                   "slime/train/ois": 1.0}


@needs_slime
@pytest.mark.parametrize("mode", ["truncate", "mask"])
def test_slimes_mis_metrics_reach_the_shared_names(mode: str, tmp_path: Path) -> None:
    """slime's MIS helper (the sequence level), configured by the compiled job's parsed args, on a small batch: the
    metrics it reports (``mis_<key>`` in the loss, ``train/mis_<key>`` in the logs) carry ``is/capped_fraction`` and
    ``is/mismatch_kl``."""
    import torch

    from agentbridge.models import resolve_model_path
    from agentbridge_slime.validate import parse_job

    job = compile_job(tmp_path / "job", *GRPO, "algorithm.is_correction.level=sequence",
                      f"algorithm.is_correction.mode={mode}")
    args = parse_job(job.path.resolve(), str(resolve_model_path("builtin:tiny")))
    mis = importlib.import_module(MIS.rpartition(".")[0])
    train = [torch.tensor([-0.1, -0.5, -0.5]), torch.tensor([-1.0, -0.2])]
    rollout = [torch.tensor([-0.3, -2.2, -0.5]), torch.tensor([-1.1, -0.2])]
    masks = [torch.ones(3), torch.ones(2)]
    _, _, metrics = mis.compute_mis_weights(args, train_log_probs=train, rollout_log_probs=rollout, loss_masks=masks)
    scalars = {f"train/mis_{key}": float(torch.cat(values).float().mean()) for key, values in metrics.items()}
    row = step_row(1, scalars, NORMALIZED, "slime")
    assert {name for name in row if name.startswith("is/")} == {"is/capped_fraction", "is/mismatch_kl"}
    assert row["is/capped_fraction"] == pytest.approx(0.6)  # the first sequence (3 of 5 tokens): exp(1.9) > 2
    assert row["is/mismatch_kl"] == pytest.approx(float((torch.cat(rollout) - torch.cat(train)).mean()))
