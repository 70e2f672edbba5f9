"""slime's ``--custom-pg-loss-reducer-function-path`` for Dr. GRPO: the policy loss summed over each sample's tokens
and divided by a constant, the job's max response length (``--rollout-max-response-len``), instead of the sample's
token count. slime then averages over samples as for every reduction, so the loss is the token sum over
``samples x max response length`` (Liu et al. 2025). Runs in slime's Megatron actor (it needs Megatron's ``mpu``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def dr_grpo_pg_loss_reducer(total_lengths: list[int], response_lengths: list[int], loss_masks: list[Any],
                            calculate_per_token_loss: bool = False) -> Callable[[Any], Any]:
    """slime's reducer signature (docs/en/get_started/customization.md, section 11): slime's own
    ``get_sum_of_sample_mean`` with every sample's denominator the constant max response length."""
    import torch
    from megatron.training.global_vars import get_args
    from slime.backends.megatron_utils.cp_utils import get_sum_of_sample_mean

    constant = float(get_args().rollout_max_response_len)
    denoms = [torch.tensor(constant, device=m.device) for m in loss_masks]
    return get_sum_of_sample_mean(total_lengths, response_lengths, loss_masks, sample_denoms=denoms,
                                  calculate_per_token_loss=calculate_per_token_loss)
