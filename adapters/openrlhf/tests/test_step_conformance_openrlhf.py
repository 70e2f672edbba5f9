"""One OpenRLHF actor-loss step against agentbridge's reference step."""

from __future__ import annotations

from agentbridge.conformance.step import run_step, step_lines


def test_openrlhf_step_optimizer_matches_and_the_loss_difference_is_named() -> None:
    cell = run_step("openrlhf")
    # the optimizer (groups, lr, betas, eps, decay, clip) matches; the loss and its gradient differ by OpenRLHF's KL
    assert cell.deltas["update"] <= 1e-5 and cell.worst() == ["grad"], step_lines([cell])
    assert 0 < cell.deltas["loss"] < 1e-3
