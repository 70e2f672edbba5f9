"""OpenRLHF's side of the algorithm conformance: the golden batch through OpenRLHF 0.11.2's own advantage and loss
code, configured by the compiled job (``launch.sh``'s argv through OpenRLHF's own parser). Stand-ins as in the
rollout conformance (:mod:`agentbridge_openrlhf.standins`): vLLM and DeepSpeed, so the modules import.

Real: ``RemoteExperienceMaker.compute_advantages_and_returns`` (length penalties, group baselines, returns, GAE,
whitening) on an ``Experience``; ``compute_approx_kl`` / ``compute_reward`` for KL in the reward; ``PolicyLoss``
built with the arguments ``PolicyModelActor`` gives it, fed the batch's ``rollout_logp`` as the engine's
``rollout_log_probs`` (its IS correction, when the job sets one); the KL loss as the actor's training step computes it
(``compute_approx_kl`` + ``aggregate_loss`` x ``kl.init_coef``). Stand-in: dynamic filtering is an inline condition in
``SamplesGenerator``'s Ray dispatch loop (a group is kept when ``min_r < mean score < max_r``), applied here to the
same arguments, as that loop cannot run without vLLM engines. A reference model exists when ``kl.init_coef > 0``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentbridge.adapter.conformance import Documented

# what OpenRLHF cannot be configured to do as the reference does: algorithm -> quantity -> Documented (pinned)
KL_TOKEN_MEAN = ("token-mean over the batch, not the per-sequence mean of the policy loss: the actor's "
                 "training_step aggregates the KL loss with aggregate_loss's default (token_level_loss), whatever "
                 "--actor.loss_agg_mode says, and no flag changes it")
DIFFERENCES: dict[str, dict[str, Documented]] = {
    "grpo": {"kl": Documented(KL_TOKEN_MEAN, off=None, on=2.419e-4)},
    "gspo": {"kl": Documented(KL_TOKEN_MEAN, off=None, on=2.419e-4)},
    "dr_grpo": {"loss": Documented("token-mean over the batch instead of a sum over a constant (max_response_tokens): "
                                   "--actor.loss_agg_mode offers token-mean and seq-mean-token-mean only",
                                   off=7.985e-3, on=7.985e-3),
                "kl": Documented("aggregated as the loss (token-mean)", off=None, on=2.065e-3)},
    "dapo": {"kept": Documented("no dynamic sampling: OpenRLHF's filter keeps a group by its mean reward "
                                "(dynamic_filtering_range), not by whether its rewards differ, so the job leaves it "
                                "off", off=2, on=2)},
    "rloo": {"loss": Documented("token-mean instead of per-sequence token sums: --actor.loss_agg_mode has no "
                                "seq-mean-token-sum", off=4.619e-2, on=4.619e-2),
             "kl": Documented("aggregated as the loss (token-mean)", off=None, on=8.960e-3)},
    "reinforce_pp": {"advantages": Documented("with KL on: k3 in the loss, not a k1 penalty in the token rewards",
                                              off=None, on=4.196e-2),
                     "kl": Documented("k3 in the loss instead of k1 in the reward", off=None, on=2.108e-3)},
    "ppo": {"advantages": Documented("GAE runs over every response position, environment tokens included (the "
                                     "reference skips them); with KL on, k3 is in the loss, not k1 in the token "
                                     "rewards", off=7.556e-3, on=3.487e-2),
            "kl": Documented("k3 in the loss instead of k1 in the reward", off=None, on=2.108e-3)},
    # the recipe axis (grpo, one knob set; KL on where the case sets kl_coef): the token-mean KL loss as for grpo
    # itself, at each estimator and coefficient
    "grpo@kl_k1": {"kl": Documented(KL_TOKEN_MEAN, off=None, on=1.724e-4)},
    "grpo@kl_k2": {"kl": Documented(KL_TOKEN_MEAN, off=None, on=4.507e-2)},
    "grpo@kl_in_reward": {"advantages": Documented(
        "KL in the reward enters per token after the group normalisation: compute_advantages_and_returns "
        "normalises the scalar rewards within each group first, then compute_reward subtracts kl_coef x each "
        "token's k1 on that token and the advantage is the return from each token on (get_cumulative_returns), "
        "not the reward minus the summed KL normalised in its group and broadcast", off=None, on=1.453)},
}
NOT_PRODUCED: dict[str, str] = {}  # quantity -> why not: none, each is read from OpenRLHF's code


def policy_loss(args: Any) -> Any:
    """OpenRLHF's ``PolicyLoss`` as its actor builds it from the parsed job arguments (``PPOActor.__init__``);
    with the DeepSpeed stand-in, so ``openrlhf.models`` imports without flash-attn."""
    from agentbridge_openrlhf.standins import deepspeed

    deepspeed.install()
    from openrlhf.models.loss import PolicyLoss

    return PolicyLoss(clip_eps_low=args.actor.eps_clip_low_high[0], clip_eps_high=args.actor.eps_clip_low_high[1],
                      dual_clip=args.actor.dual_clip, token_level_loss=args.actor.loss_agg_mode == "token-mean",
                      policy_loss_type=args.actor.policy_loss_type,
                      is_correction_level=args.algo.advantage.is_correction_level,
                      is_correction_mode=args.algo.advantage.is_correction_mode,
                      is_correction_gating=args.algo.advantage.is_correction_gating,
                      is_correction_threshold=args.algo.advantage.is_correction_threshold)


def probe(job: Path, batch: Any) -> dict[str, Any]:
    """The algorithm quantities OpenRLHF computes for ``batch`` under the job in ``job``."""
    from types import SimpleNamespace

    import torch

    from agentbridge.spec import load_spec
    from agentbridge_openrlhf.standins import deepspeed, use_vllm_standin
    from agentbridge_openrlhf.validate import job_argv, parse_args

    use_vllm_standin()  # the experience maker's module imports vllm ...
    deepspeed.install()  # ... and DeepSpeed
    from openrlhf.models.loss import aggregate_loss
    from openrlhf.models.utils import compute_approx_kl
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    spec = load_spec(str(Path(job) / "spec.yaml"))
    args = parse_args(job_argv(Path(job), "model"))
    t = batch.tensors()
    mask = t["mask"].bool()
    has_ref = args.algo.kl.init_coef > 0
    if has_ref and not args.algo.kl.use_loss:  # make_experience: KL in the reward
        kl = compute_approx_kl(t["old_logp"], t["ref_logp"], kl_estimator=args.algo.kl.estimator)
    else:
        kl = torch.zeros_like(t["old_logp"])
    width = mask.shape[1]
    exp = Experience(action_mask=mask, values=t["values"], kl=kl, rewards=t["rewards"].clone(),
                     scores=t["rewards"].clone(), truncated=torch.tensor([bool(m[-1]) for m in batch.mask]),
                     response_length=mask.sum(-1).float(), index=list(range(len(batch.rewards))), info={})
    maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(args.algo.kl.init_coef),
                                  SimpleNamespace(args=args), None)
    (exp,) = maker.compute_advantages_and_returns([exp])
    # the actor's training_step passes experience.rollout_log_probs, vLLM's log-probs of the sampled tokens
    loss, clip_ratio, *_ = policy_loss(args)(t["logp"], t["old_logp"], batch.advantages(spec.algorithm),
                                             action_mask=mask, rollout_log_probs=t["rollout_logp"])
    kl_term = 0.0
    if args.algo.kl.use_loss and args.algo.kl.init_coef > 0:
        kld = compute_approx_kl(t["logp"], t["ref_logp"], log_probs_old=t["old_logp"],
                                kl_estimator=args.algo.kl.estimator, unbiased_gradient=args.algo.kl.unbiased_gradient)
        # as training_step calls it: no token_level_loss, so a token mean whatever loss_agg_mode says
        kl_term = float(aggregate_loss(kld, mask)) * args.algo.kl.init_coef
    kept = batch.groups()
    if args.algo.dynamic_filtering_enable:
        low, high = args.algo.dynamic_filtering_range
        kept = [g for g in kept if low < float(t["rewards"][t["group"] == g].mean()) < high]
    return {"advantages": (exp.advantages * mask)[:, :width].tolist(), "loss": float(loss),
            "clip_fraction": float(clip_ratio), "kl": kl_term, "kept": kept}
