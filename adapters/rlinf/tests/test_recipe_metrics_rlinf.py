"""The recipe rows RLinf's validator reads from its composed and validated config (``algorithm.entropy_bonus`` /
``calculate_entropy``, ``actor.optim.clip_grad``, ``algorithm.n_minibatches``, ``actor.model.is_lora``) in the shared
words of ``agentbridge.compare.semantics``, and the train/rollout log-prob gap RLinf's actor logs written under the
shared name of ``agentbridge.runs.IS_METRIC_NAMES``."""

from __future__ import annotations

from pathlib import Path

from conftest import compile_job, needs_rlinf

from agentbridge.compare.semantics import batch_words, entropy_words, grad_clip_words, overlong_words, shared
from agentbridge.runs import IS_METRIC_NAMES
from agentbridge_rlinf.run_metrics import NORMALIZED

KNOBS = ["algorithm.entropy_coef=0.01", "algorithm.max_grad_norm=0.5", "algorithm.overlong.mask_truncated=true",
         "algorithm.overlong.buffer=16", "algorithm.mini_batches=2"]
ROWS = ("entropy bonus", "overlong", "grad clip", "batch", "LoRA")


@needs_rlinf
def test_rlinfs_recipe_rows_carry_the_specs_values(tmp_path: Path) -> None:
    from agentbridge_rlinf.validate import validate_job

    semantics: dict[str, str] = {}
    assert validate_job(compile_job(tmp_path / "job", *KNOBS).path, [], semantics=semantics) == []
    assert list(semantics) == list(ROWS)  # the recipe aspects (RLinf's validator reports no others yet)
    assert shared(semantics["entropy bonus"]) == entropy_words(0.01)
    assert shared(semantics["grad clip"]) == grad_clip_words(0.5)
    assert shared(semantics["overlong"]) == overlong_words(True, 16, 1.0)
    assert shared(semantics["batch"]) == batch_words(2, 4, 1, 2)  # one update epoch, n_minibatches 2
    assert shared(semantics["LoRA"]) == "full fine-tuning"  # model.lora is refused on RLinf
    plain: dict[str, str] = {}
    assert validate_job(compile_job(tmp_path / "plain").path, [], semantics=plain) == []
    assert [shared(plain[a]) for a in ("entropy bonus", "grad clip", "overlong")] == ["none", "max norm 1", "none"]


@needs_rlinf
def test_rlinfs_train_rollout_gap_reaches_the_shared_name() -> None:
    """RLinf 0.3.0's FSDP actor logs ``actor/rollout_train_kl`` (mean |recomputed - rollout log-prob|), which its
    agent runner writes as ``train/<key>`` (both read in RLinf's source here: its FSDP actor does not import with
    transformers 5); the run's row carries it as ``is/logp_abs_diff``."""
    import rlinf

    from agentbridge.training.phases import step_row
    from agentbridge_rlinf.run_metrics import DRIVER

    package = Path(rlinf.__file__).parent
    actor = (package / "workers" / "actor" / "fsdp_actor_worker.py").read_text()
    assert 'mean_metric_dict["actor/rollout_train_kl"] = rollout_train_kl' in actor
    assert 'f"train/{k}": v' in (package / "runners" / "agent_runner.py").read_text()
    assert {v for v in NORMALIZED.values() if v.startswith("is/")} == {"is/logp_abs_diff"} <= set(IS_METRIC_NAMES)
    row = step_row(1, {"train/actor/rollout_train_kl": 0.03, "train/actor/policy_loss": -0.1}, NORMALIZED, "rlinf",
                   DRIVER)
    assert row == {"step": 1, "is/logp_abs_diff": 0.03, "rlinf/loss": -0.1}
