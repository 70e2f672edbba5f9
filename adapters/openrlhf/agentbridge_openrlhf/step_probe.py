"""OpenRLHF's side of the one-step conformance: OpenRLHF 0.11.2's actor loss and optimizer settings on one batch,
configured by the compiled job (``launch.sh``'s argv through OpenRLHF's own parser).

What stops ``PolicyModelActor.training_step`` itself on CPU: its module ``openrlhf.trainer.ray.ppo_actor`` starts
with ``import deepspeed`` and ``openrlhf.models.actor`` (``Actor``) with ``from peft import ...``; neither is in the
CPU environment, and the step's ``strategy.backward`` / ``strategy.optimizer_step`` are DeepSpeed's engine
(``model.backward`` / ``model.step`` of what ``deepspeed.initialize`` builds). Run here, as ``training_step`` calls
them: OpenRLHF's ``log_probs_from_logits`` on the HF model's logits, ``PolicyLoss`` built as ``PolicyModelActor``
builds it with ``get_loss_batch_info``'s batch info, the KL loss (``compute_approx_kl`` with ``kl.estimator``,
``aggregate_loss``, x ``kl.init_coef``); then the optimizer's parameter groups
(``get_optimizer_grouped_parameters``' rule, restated: its module imports DeepSpeed) with the job's ``actor.adam``
lr, betas, eps and weight decay in ``torch.optim.AdamW`` (DeepSpeed's Adam in ``adam_w_mode``), clipped to
``actor.max_norm``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def step(job: Path, init: str, batch: dict[str, Any]) -> dict[str, Any]:
    """The loss, clipped gradients and parameter updates of one OpenRLHF actor training step on ``batch``."""
    from agentbridge.adapter.conformance import train_step

    args = job_args(job)
    return train_step(init, lambda model: actor_loss(args, model, batch), lambda model: actor_optimizer(model, args),
                      float(args.actor.max_norm))


def job_args(job: Path) -> Any:
    """The compiled job's arguments as OpenRLHF's own parser makes them (with the CPU stand-ins installed first)."""
    from agentbridge_openrlhf.standins import deepspeed, use_vllm_standin
    from agentbridge_openrlhf.validate import job_argv, parse_args

    use_vllm_standin()
    deepspeed.install()  # openrlhf.models opens as a namespace: its loss and utils modules, not the Actor
    return parse_args(job_argv(Path(job), "model"))


def actor_optimizer(model: Any, args: Any) -> Any:
    """``torch.optim.AdamW`` with the job's ``actor.adam`` settings over OpenRLHF's parameter groups."""
    import torch

    adam = args.actor.adam
    return torch.optim.AdamW(_groups(model, adam.weight_decay), lr=adam.lr, betas=tuple(adam.betas), eps=adam.eps)


def actor_loss(args: Any, model: Any, batch: dict[str, Any]) -> Any:
    """OpenRLHF's actor loss on ``batch`` (``input_ids``, ``attention_mask``, ``response_mask``, ``old_logp``,
    ``ref_logp``, ``advantages``): the policy loss ``PolicyModelActor`` builds, plus its KL loss if the job has one."""
    from types import SimpleNamespace

    from openrlhf.models.loss import aggregate_loss
    from openrlhf.models.utils import compute_approx_kl, log_probs_from_logits
    from openrlhf.utils.loss_utils import get_loss_batch_info

    from agentbridge_openrlhf.algorithm_probe import policy_loss

    mask = batch["response_mask"].bool()
    width = mask.shape[1]
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logp = log_probs_from_logits(logits[:, :-1, :], batch["input_ids"][:, 1:])[:, -width:]
    info = get_loss_batch_info(SimpleNamespace(args=args), mask)
    loss, *_ = policy_loss(args)(logp, batch["old_logp"], batch["advantages"], action_mask=mask,
                                 rollout_log_probs=batch["old_logp"], **info)
    if args.algo.kl.use_loss and args.algo.kl.init_coef > 0:
        kl = compute_approx_kl(logp, batch["ref_logp"], log_probs_old=batch["old_logp"],
                               kl_estimator=args.algo.kl.estimator, unbiased_gradient=args.algo.kl.unbiased_gradient)
        loss = loss + aggregate_loss(kl, mask, **info) * args.algo.kl.init_coef
    return loss


NO_DECAY = ("bias", "layer_norm.weight", "layernorm.weight", "norm.weight", "ln_f.weight")  # OpenRLHF's list


def _groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """OpenRLHF's ``get_optimizer_grouped_parameters``: weight decay except on biases and norms."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for n, p in named if not any(nd in n for nd in NO_DECAY)], "weight_decay": weight_decay},
            {"params": [p for n, p in named if any(nd in n for nd in NO_DECAY)], "weight_decay": 0.0}]
