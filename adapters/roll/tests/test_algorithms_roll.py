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
