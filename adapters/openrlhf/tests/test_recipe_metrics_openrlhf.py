"""The recipe rows OpenRLHF's validator reads from its parsed arguments (``actor.entropy_coef``, ``actor.max_norm``,
``ds.lora.*``, ``train.max_epochs`` / ``train.batch_size``) in the shared words of ``agentbridge.compare.semantics``,
and the IS-correction metrics OpenRLHF's own policy loss computes written under the shared names of
``agentbridge.runs.IS_METRIC_NAMES``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbridge.compare.semantics import ASPECTS, batch_words, entropy_words, grad_clip_words, overlong_words, shared
from agentbridge.runs import IS_METRIC_NAMES
from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.run_metrics import NORMALIZED, TRAIN, normalize
from agentbridge_openrlhf.validate import validate_job

SMALL = ["algorithm.name=grpo", "data.train.size=8", "data.eval.size=4", "algorithm.batch_size=2",
         "algorithm.group_size=4", "algorithm.steps=1", "algorithm.warm_start=null"]
KNOBS = ["algorithm.entropy_coef=0.01", "algorithm.max_grad_norm=0.5", "algorithm.overlong.mask_truncated=true",
         "algorithm.overlong.buffer=16", "algorithm.epochs=2", "algorithm.mini_batches=2"]


def _semantics(tmp_path: Path, *sets: str) -> dict[str, str]:
    spec = load_spec("examples/calculator.yaml", [*SMALL, *sets])
    assert OpenRLHFBackend().check(spec) == [], [str(p) for p in OpenRLHFBackend().check(spec)]
    semantics: dict[str, str] = {}
    assert validate_job(OpenRLHFBackend().compile(spec, tmp_path / "job").path, [], semantics=semantics) == []
    return semantics


def test_openrlhfs_recipe_rows_carry_the_specs_values(tmp_path: Path) -> None:
    semantics = _semantics(tmp_path, *KNOBS)
    assert list(semantics) == list(ASPECTS)
    assert shared(semantics["entropy bonus"]) == entropy_words(0.01)
    assert shared(semantics["grad clip"]) == grad_clip_words(0.5)
    assert shared(semantics["overlong"]) == overlong_words(True, 16, 1.0)
    assert shared(semantics["batch"]) == batch_words(2, 4, 2, 2)  # train.max_epochs 2, train.batch_size 4 of 8
    assert shared(semantics["LoRA"]) == "full fine-tuning"  # model.lora is refused on OpenRLHF


@pytest.mark.parametrize("mode", ["clip", "mask"])
def test_openrlhfs_is_metrics_reach_the_shared_names(mode: str) -> None:
    """OpenRLHF 0.11.2's ``PolicyLoss`` with the IS correction agentbridge compiles (token level, ratio gating, band
    [0, cap]) on a small batch: the ``vllm_kl`` and ``is_filter_ratio`` its actor logs (``train/<key>``) become
    ``is/mismatch_kl`` and ``is/capped_fraction``."""
    import openrlhf
    import torch

    from agentbridge_openrlhf.standins import deepspeed

    deepspeed.install()  # openrlhf.models imports without flash-attn and DeepSpeed
    from openrlhf.models.loss import PolicyLoss

    loss_fn = PolicyLoss(is_correction_level="token", is_correction_mode=mode, is_correction_gating="ratio",
                         is_correction_threshold=[0.0, 2.0])
    old = torch.tensor([[-0.1, -0.5, -0.5], [-1.0, -0.2, -0.3]])
    rollout = torch.tensor([[-0.3, -2.2, -0.5], [-1.1, -0.2, -0.3]])
    mask = torch.ones(2, 3)
    _, _, _, vllm_kl, is_filter_ratio = loss_fn(old, old, torch.ones(2, 3), action_mask=mask,
                                                rollout_log_probs=rollout)
    source = (Path(openrlhf.__file__).parent / "trainer" / "ray" / "ppo_actor.py").read_text()
    keys = {"vllm_kl": vllm_kl, "is_filter_ratio": is_filter_ratio}
    assert all(f'experience.info["{key}"]' in source for key in keys)  # the names its actor logs them under
    row = normalize(1, {f"{TRAIN}{key}": float(value) for key, value in keys.items()})
    assert {name for name in row if name.startswith("is/")} == {"is/mismatch_kl", "is/capped_fraction"}
    assert set(v for v in NORMALIZED.values() if v.startswith("is/")) <= set(IS_METRIC_NAMES)
    assert row["is/mismatch_kl"] == pytest.approx(float((rollout - old).mean()))
    assert row["is/capped_fraction"] == pytest.approx(1 / 6)  # exp(1.7) above the cap of 2
