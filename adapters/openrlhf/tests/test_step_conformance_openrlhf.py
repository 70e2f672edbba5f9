"""One OpenRLHF actor-loss step against agentbridge's reference step: the KL loss's token mean is the one
difference, documented, and the whole of it."""

from __future__ import annotations

from typing import Any

import pytest

from agentbridge.conformance import step
from agentbridge.conformance.algorithms import policy_loss
from agentbridge.conformance.step import run_step, step_lines


def kl_token_mean(name: str, logp: Any, old_logp: Any, ref_logp: Any, adv: Any, m: Any, kl_coef: float,
                  max_tokens: int) -> tuple[Any, Any, Any]:
    """The reference loss with OpenRLHF's documented KL aggregation: k3 averaged over every token of the batch."""
    import torch

    loss, _, clipped = policy_loss(name, logp, old_logp, ref_logp, adv, m, 0.0, max_tokens)
    k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return loss, kl_coef * (k3 * m).sum() / m.sum(), clipped


def test_openrlhf_step_differs_by_the_documented_kl_aggregation_only(monkeypatch: pytest.MonkeyPatch) -> None:
    cell = run_step("openrlhf")
    # the optimizer (groups, lr, betas, eps, decay, clip) matches; loss and gradient differ by the KL aggregation
    assert cell.status == "≠" and cell.differing() == ["loss", "grad"], step_lines([cell])
    assert cell.deltas["update"] <= 1e-5 and cell.deltas["grad"] > 1e-3
    assert "aggregate_loss" in cell.known["grad"] and "(documented: kl: token-mean" in step_lines([cell])[0]
    monkeypatch.setattr(step, "policy_loss", kl_token_mean)  # the reference with OpenRLHF's KL token mean
    explained = run_step("openrlhf")
    assert max(explained.deltas.values()) <= 1e-5, step_lines([explained])  # nothing else differs
    assert explained.status == "✘" and explained.unexpected() == ["loss (documented, yet equal)",
                                                                  "grad (documented, yet equal)"]
