"""ROLL's training math on the golden batch (agentbridge's algorithm conformance), where ROLL imports: ROLL's own
reward normalisation, token rewards, advantages and agentic actor loss, configured as each compiled job configures
them, equal agentbridge's reference, or the difference is one the adapter documents (``DIFFERENCES``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roll_helpers import needs_roll

from agentbridge.conformance.algorithms import problem_lines, run_algorithms

pytestmark = needs_roll


def test_rolls_math_equals_the_reference_or_says_why() -> None:
    cells = {c.algorithm: c for c in run_algorithms("roll")}
    assert not [c for c in cells.values() if c.status == "✘"], problem_lines(list(cells.values()))
    assert cells["dapo"].status == "✔"  # clip-higher, token-mean, dynamic sampling
    assert cells["grpo"].differing() == ["clip_fraction"]  # ROLL's logged clipfrac is aggregated as the loss is
    assert {a for a, c in cells.items() if c.status == "≠"} == {"grpo", "dr_grpo", "reinforce_pp", "ppo"}
    assert cells["gspo"].status == cells["rloo"].status == "n/a" and "backends that can" in cells["rloo"].why


def test_the_recipe_row_equals_the_reference_or_says_why() -> None:
    """Each recipe knob (grpo) through ROLL's reward normalisation, token rewards, advantages, train-infer correction
    and actor loss as the compiled job configures them: the reference's advantages and loss, except KL in the reward
    (ROLL's token-level placement, pinned) and IS token mask (ROLL's filter leaves the masked token out of its
    sequence's mean, pinned); the logged clip fraction follows loss_agg_mode (pinned, identical under token_mean);
    refused at check: loss_agg seq_mean_token_sum_norm, k1 and k2 in the loss (ROLL's KL loss is k3)."""
    from agentbridge.conformance.algorithms import IDENTICAL, RECIPE_CASES

    cells = {c.algorithm.split("@")[1]: c for c in run_algorithms("roll", (), recipe=tuple(RECIPE_CASES))}
    assert list(cells) == list(RECIPE_CASES)
    assert not [c for c in cells.values() if c.status == "✘"], problem_lines(list(cells.values()))
    assert cells["token_mean"].status == "✔"
    assert {case: c.differing() for case, c in cells.items() if c.status == "≠"} == {
        **{case: ["clip_fraction"] for case in ("clip_higher", "dual_clip", "seq_mean_token_sum", "scale_none",
                                                "scale_batch", "is_token_truncate", "is_sequence_truncate",
                                                "is_sequence_mask")},
        "kl_in_reward": ["advantages", "clip_fraction"], "is_token_mask": ["loss", "clip_fraction"]}
    assert all(c.deltas["loss"] <= IDENTICAL for case, c in cells.items() if c.status == "≠" and
               case != "is_token_mask")
    assert all(c.deltas["advantages"] <= IDENTICAL for case, c in cells.items() if c.status == "≠" and
               case != "kl_in_reward")
    assert {case for case, c in cells.items() if c.status == "n/a"} == {"seq_mean_token_sum_norm", "kl_k1", "kl_k2"}
    assert cells["seq_mean_token_sum_norm"].why.startswith(
        "algorithm.loss_agg: roll cannot run grpo with loss_agg seq_mean_token_sum_norm (")
    assert cells["kl_k2"].why.startswith("algorithm.kl_estimator: roll cannot run grpo with kl_estimator k2 (")


def _delta(tmp_path: Path, case: str, quantity: str, edit: dict[str, Any] | None = None,
           sets: tuple[str, ...] = ()) -> float:
    """max |Δ| of ``quantity`` between the reference and ROLL's probe on the recipe case's job (plus ``sets``), its
    config's keys then set to ``edit`` (dotted; a mapping broken on purpose)."""
    from agentbridge.conformance.algorithms import golden_batch, max_delta, recipe_of_case, reference
    from agentbridge_roll.algorithm_probe import probe

    job = _job(tmp_path, case, edit, sets)
    batch, knobs = golden_batch(), recipe_of_case(case, "roll")
    return max_delta(reference("grpo", batch, knobs.kl_coef, knobs)[quantity], probe(job, batch)[quantity])


def _job(tmp_path: Path, case: str, edit: dict[str, Any] | None = None, sets: tuple[str, ...] = ()) -> Path:
    """The recipe case's ROLL job (plus ``sets``), its config's keys then set to ``edit`` (dotted)."""
    import yaml

    from agentbridge.adapter import set_dotted
    from agentbridge.conformance.algorithms import RECIPE_CASES, golden_algorithm_spec
    from agentbridge_roll.backend import RollBackend

    out = tmp_path / f"{case}-{len(list(tmp_path.iterdir()))}"
    job = RollBackend().compile(golden_algorithm_spec("grpo", "roll", 0.0, (*RECIPE_CASES[case][1], *sets)), out).path
    if edit:
        config = yaml.safe_load((job / "roll_job.yaml").read_text())
        for key, value in edit.items():
            set_dotted(config, key, value)
        (job / "roll_job.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return job


def test_the_recipe_cells_follow_the_compiled_keys(tmp_path: Path) -> None:
    """The probe reads the knobs from the job: with ROLL's key broken on purpose the cell's quantity leaves the
    reference (the IS weight off, at another level or bound; the mask filter off)."""
    from agentbridge.conformance.algorithms import CLOSE, IDENTICAL

    weight = "train_infer_correction.is_weight."
    assert _delta(tmp_path, "is_token_truncate", "loss") <= IDENTICAL
    assert _delta(tmp_path, "is_token_truncate", "loss", {weight + "enabled": False}) > CLOSE
    assert _delta(tmp_path, "is_token_truncate", "loss", {weight + "upper_bound": 100.0}) > CLOSE
    assert _delta(tmp_path, "is_sequence_truncate", "loss") <= IDENTICAL
    assert _delta(tmp_path, "is_sequence_truncate", "loss", {weight + "weight_type": "token"}) > CLOSE
    assert _delta(tmp_path, "is_sequence_mask", "loss") <= IDENTICAL
    assert _delta(tmp_path, "is_sequence_mask", "loss", {"train_infer_correction.filters": []}) > CLOSE


def test_kl_in_the_reward_is_rolls_token_level_placement(tmp_path: Path) -> None:
    """What the kl_in_reward pin documents: ROLL's advantage is the group-normalised reward minus init_kl_coef x the
    k1 estimate (old vs reference log-probs) summed from each token to the end of its response; without the
    token-level KL (the key broken on purpose) it is the normalised reward alone."""
    import torch

    from agentbridge.conformance.algorithms import CLOSE, IDENTICAL, golden_batch, max_delta, reference_advantages
    from agentbridge_roll.algorithm_probe import probe

    batch = golden_batch()
    t = batch.tensors(dtype=torch.float64)
    m = t["mask"].double()
    kl = (t["old_logp"] - t["ref_logp"]) * m
    to_end = torch.flip(torch.cumsum(torch.flip(kl, [1]), 1), [1])
    want = ((reference_advantages("grpo", t, 0.0) - 0.05 * to_end) * m).tolist()
    job = _job(tmp_path, "kl_in_reward")
    assert max_delta(want, probe(job, batch)["advantages"]) <= IDENTICAL
    broken = _job(tmp_path, "kl_in_reward", {"add_token_level_kl": False})
    assert max_delta(want, probe(broken, batch)["advantages"]) > CLOSE


def test_sequence_mask_with_recompute_drops_the_sequence_from_the_mean(tmp_path: Path) -> None:
    """What the is_sequence_mask pin documents beside it: with several backward steps a step ROLL recomputes the
    old log-probs and its pipeline filters before the batch's counts, so a masked sequence leaves the sequence mean's
    denominator (the loss moves by 0.0893 on the golden batch); on the default path it does not (the reference's
    loss)."""
    import math

    from agentbridge.conformance.algorithms import IDENTICAL

    assert _delta(tmp_path, "is_sequence_mask", "loss") <= IDENTICAL
    assert math.isclose(_delta(tmp_path, "is_sequence_mask", "loss", sets=("algorithm.mini_batches=7",)), 0.08934,
                        rel_tol=0.01)
