"""One veRL actor update (ppo_loss, build_optimizer, clip_grad) against agentbridge's reference step."""

from __future__ import annotations

from agentbridge.conformance.step import run_step, step_lines

NO_DECAY = ["backend.overrides={actor_rollout_ref.actor.optim.weight_decay: 0.0}"]


def test_verl_step_matches_without_weight_decay_and_the_jobs_decay_is_named() -> None:
    cell = run_step("verl", sets=NO_DECAY)
    assert cell.status in ("✔", "≈"), step_lines([cell])
    default = run_step("verl")  # veRL's optim.weight_decay 0.01: only the update differs, the gradients do not
    assert default.worst() == ["update"] and default.deltas["grad"] <= 1e-5, step_lines([default])
