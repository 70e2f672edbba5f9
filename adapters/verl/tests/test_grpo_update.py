"""One GRPO update with veRL's core_algos on the batch agentbridge's loop produced changes the weights."""

from __future__ import annotations

from typing import Any

import torch


def test_grpo_update_on_the_agent_loop_batch_changes_the_weights(scripted_rollout: dict[str, Any]) -> None:
    from transformers import AutoModelForCausalLM
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.torch_functional import logprobs_from_logits

    from agentbridge.models import resolve_model_path

    cfg, gen = scripted_rollout["cfg"], scripted_rollout["gen"]
    b = gen.batch
    adv_fn = get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    advantages, _ = adv_fn(token_level_rewards=b["rm_scores"], response_mask=b["response_mask"],
                           index=scripted_rollout["uid"], norm_adv_by_std_in_grpo=True)
    per_seq = (advantages * b["response_mask"]).sum(-1) / b["response_mask"].sum(-1)
    assert (per_seq > 0).sum() == 4 and (per_seq < 0).sum() == 4  # right answers up, wrong ones down

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny"), dtype=torch.float32)
    model.train()
    resp_len = b["responses"].shape[1]
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                   position_ids=b["position_ids"]).logits[:, -resp_len - 1:-1, :]
    log_prob = logprobs_from_logits(logits, b["responses"])
    mask = b["response_mask"].bool()
    # the batch lines up with the model: the server's log-probs are recomputed from the padded batch
    assert torch.allclose(log_prob[mask], b["rollout_log_probs"][mask], atol=1e-4)

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    pg_loss, _ = loss_fn(old_log_prob=b["rollout_log_probs"], log_prob=log_prob, advantages=advantages,
                         response_mask=b["response_mask"], loss_agg_mode=actor.loss_agg_mode, config=actor)
    pg_loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    assert grad_norm > 0
    before = [p.detach().clone() for p in model.parameters()]
    torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0).step()
    changed = sum(int(not torch.equal(p.detach(), q)) for p, q in zip(model.parameters(), before, strict=True))
    assert changed > 0
