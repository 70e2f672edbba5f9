"""The recipe rows TRL's validator reads from its own config objects (GRPOConfig, the PEFT LoraConfig the trainer
gets) in the shared words of ``agentbridge.compare.semantics``, and TRL's importance-sampling metrics written under
the shared names of ``agentbridge.runs.IS_METRIC_NAMES``."""

from __future__ import annotations

import inspect
from pathlib import Path

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
from agentbridge.spec import load_spec
from agentbridge.training.logger import RunLogger
from agentbridge.trajectory import Trajectory
from agentbridge_trl.backend import TrlBackend
from agentbridge_trl.trainer import NORMALIZED
from agentbridge_trl.validate import validate_job

KNOBS = ["algorithm.name=grpo", "model.lora.rank=16", "model.lora.target_modules=[v_proj,q_proj]",
         "model.lora.dropout=0.05", "algorithm.entropy_coef=0.01", "algorithm.max_grad_norm=0.5",
         "algorithm.overlong.mask_truncated=true", "algorithm.overlong.buffer=16", "algorithm.epochs=2",
         "algorithm.mini_batches=2"]


def _semantics(tmp_path: Path, sets: list[str]) -> dict[str, str]:
    spec = load_spec("examples/calculator.yaml", sets)
    assert TrlBackend().check(spec) == [], [str(p) for p in TrlBackend().check(spec)]
    semantics: dict[str, str] = {}
    assert validate_job(TrlBackend().compile(spec, tmp_path / "job").path, [], semantics=semantics) == []
    return semantics


def test_trls_recipe_rows_carry_the_specs_values(tmp_path: Path, small_sets: list[str]) -> None:
    semantics = _semantics(tmp_path, [*small_sets, *KNOBS])
    assert list(semantics) == list(ASPECTS)
    assert shared(semantics["LoRA"]) == lora_words(16, 32, ["q_proj", "v_proj"], 0.05)
    assert shared(semantics["entropy bonus"]) == entropy_words(0.01) == "coef 0.01"
    assert shared(semantics["grad clip"]) == grad_clip_words(0.5) == "max norm 0.5"
    assert shared(semantics["overlong"]) == overlong_words(True, 16, 1.0)
    assert shared(semantics["batch"]) == batch_words(2, 4, 2, 2)  # num_iterations 2, 2 optimizer steps each
    assert semantics["grad clip"].endswith("· max_grad_norm 0.5")


def test_trls_defaults_and_dapos_own_truncation_mask(tmp_path: Path, small_sets: list[str]) -> None:
    """Without the knobs: full fine-tuning, no entropy bonus, HF Trainer's clip at 1.0. The calculator's dapo preset
    sets TRL's own mask_truncated_completions, which masks completions not ending in EOS: a difference the overlong
    row shows."""
    semantics = _semantics(tmp_path, small_sets)
    assert [shared(semantics[a]) for a in ("LoRA", "entropy bonus", "grad clip")] == \
        ["full fine-tuning", "none", "max norm 1"]
    assert shared(semantics["overlong"]) == "completions without EOS masked"


def test_trls_is_metrics_reach_the_shared_names(tmp_path: Path) -> None:
    """The names TRL 1.16's GRPOTrainer logs (in its source) are written under agentbridge's IS names; the other
    names stay under ``trl/``."""
    import trl.trainer.grpo_trainer as grpo

    source = inspect.getsource(grpo)
    assert all(f'"{name}"' in source for name in NORMALIZED), [n for n in NORMALIZED if f'"{n}"' not in source]
    assert set(NORMALIZED.values()) <= set(IS_METRIC_NAMES)
    logs = {"loss": 0.1, "sampling/importance_sampling_ratio/mean": 0.98, "sampling/importance_sampling_ratio/max": 2.0,
            "sampling/sampling_logp_difference/mean": 0.02}
    logger = RunLogger(tmp_path, prefix="trl")
    logger.add_batch([Trajectory(task_id="t", prompt_ids=[1, 2], response_ids=[3], reward=1.0)], 0.1)
    row = logger.log(1, logs, NORMALIZED)
    assert row is not None
    assert (row["is/weight_mean"], row["is/logp_abs_diff"]) == (0.98, 0.02)
    assert row["trl/sampling/importance_sampling_ratio/max"] == 2.0 and row["trl/loss"] == 0.1
    assert "trl/sampling/importance_sampling_ratio/mean" not in row
