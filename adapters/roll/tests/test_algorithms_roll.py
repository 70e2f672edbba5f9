"""ROLL's training math on the golden batch (agentbridge's algorithm conformance), where ROLL imports: ROLL's own
reward normalisation, token rewards, advantages and agentic actor loss, configured as each compiled job configures
them, equal agentbridge's reference, or the difference is one the adapter documents (``DIFFERENCES``)."""

from __future__ import annotations

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
    """Each recipe knob (grpo, KL off) through ROLL's reward normalisation, advantages and actor loss as the compiled
    job configures them: the reference's advantages and loss; the logged clip fraction follows loss_agg_mode
    (pinned, identical under token_mean); loss_agg seq_mean_token_sum_norm refused at check."""
    from agentbridge.conformance.algorithms import IDENTICAL, RECIPE_CASES

    cells = {c.algorithm.split("@")[1]: c for c in run_algorithms("roll", (), recipe=tuple(RECIPE_CASES))}
    assert list(cells) == list(RECIPE_CASES)
    assert not [c for c in cells.values() if c.status == "✘"], problem_lines(list(cells.values()))
    assert cells["token_mean"].status == "✔"
    assert {case for case, c in cells.items() if c.status == "≠"} == \
        {"clip_higher", "dual_clip", "seq_mean_token_sum", "scale_none", "scale_batch"}
    assert all(c.differing() == ["clip_fraction"] and c.deltas["loss"] <= IDENTICAL and
               c.deltas["advantages"] <= IDENTICAL for c in cells.values() if c.status == "≠")
    assert cells["seq_mean_token_sum_norm"].status == "n/a" and cells["seq_mean_token_sum_norm"].why.startswith(
        "algorithm.loss_agg: roll cannot run grpo with loss_agg seq_mean_token_sum_norm (")
