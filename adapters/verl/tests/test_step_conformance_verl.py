"""One veRL actor update (ppo_loss, build_optimizer, clip_grad) against agentbridge's reference step."""

from __future__ import annotations

from agentbridge.conformance.step import run_step, step_lines

DECAY = ["backend.overrides={actor_rollout_ref.actor.optim.weight_decay: 0.01}"]   # veRL's own default


def test_verl_step_matches_the_reference_and_a_changed_decay_is_named() -> None:
    cell = run_step("verl")  # the compiled job sets optim.weight_decay 0, as TRL and OpenRLHF
    assert cell.status in ("✔", "≈"), step_lines([cell])
    decayed = run_step("verl", sets=DECAY)  # only the update differs, the gradients do not
    assert decayed.worst() == ["update"] and decayed.deltas["grad"] <= 1e-5, step_lines([decayed])
