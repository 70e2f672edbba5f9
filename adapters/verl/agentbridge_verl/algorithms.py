"""How each agentbridge algorithm maps onto veRL 0.9.1's trainer config (pure data: imports no veRL).

Keys are dotted paths into veRL's ``ppo_trainer`` config. veRL runs every one of these with a custom agent loop,
because the agent loop only produces rollouts: advantages and losses are the trainer's.
"""

from __future__ import annotations

from typing import Any

# agentbridge name -> veRL settings. Values follow veRL's own recipes for each method.
ALGORITHMS: dict[str, dict[str, Any]] = {
    # GRPO: each sequence's token mean, then the mean over sequences (the paper's objective; TRL's loss_type grpo)
    "grpo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
    },
    # Dr. GRPO: no std normalisation, no length normalisation (sum over tokens / fixed constant)
    "dr_grpo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": False,
        "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
    },
    # DAPO: clip-higher, token-level loss, no KL; dynamic sampling by the V1 trainer's replay buffer (groups whose
    # rewards are all equal are evicted and refilled with new prompts)
    "dapo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "reward",
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
        "actor_rollout_ref.actor.clip_ratio_low": 0.2,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    },
    # GSPO: sequence-level importance ratio with a tight clip range
    "gspo": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
        "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
        "actor_rollout_ref.actor.clip_ratio_low": 3e-4,
        "actor_rollout_ref.actor.clip_ratio_high": 4e-4,
    },
    # RLOO: REINFORCE on whole sequences (token losses summed per sequence, averaged over sequences)
    "rloo": {
        "algorithm.adv_estimator": "rloo",
        "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum",
    },
    "reinforce_pp": {
        "algorithm.adv_estimator": "reinforce_plus_plus",
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    },
    # PPO with a value model: GAE advantages need a critic (veRL enables it for adv_estimator=gae)
    "ppo": {
        "algorithm.adv_estimator": "gae",
        "algorithm.gamma": 1.0,
        "algorithm.lam": 0.95,
        "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    },
}

# algorithm.loss_agg -> actor.loss_agg_mode (core_algos.agg_loss); seq-mean-token-sum-norm divides by
# actor.loss_scale_factor, which the mapping sets to agent.max_response_tokens
LOSS_AGG_MODES = {"token_mean": "token-mean", "seq_mean_token_sum": "seq-mean-token-sum",
                  "seq_mean_token_mean": "seq-mean-token-mean", "seq_mean_token_sum_norm": "seq-mean-token-sum-norm"}

# algorithm.kl_estimator -> veRL's name for it (core_algos.kl_penalty_forward: "kl"/"k1", "mse"/"k2", "low_var_kl"/"k3";
# the config documents the first of each pair)
KL_PENALTIES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
# IcePop's lower bound for is_correction mode mask: below exp(-20), the smallest IS weight veRL forms
# (rollout_corr_helper.SAFETY_BOUND clamps the log-ratio), so no weight is zeroed for being small
IS_MASK_FLOOR = 1e-9

# algorithms whose advantage is computed within a group of samples of one prompt
GROUPED = {"grpo", "dr_grpo", "dapo", "gspo", "rloo"}

NOTES = [
    "dapo: clip-higher + token-mean loss; dynamic sampling by the V1 trainer's replay buffer "
    "(algorithm.filter_groups on the reward: a group whose rewards are all equal is replaced by new prompts); the "
    "overlong penalty is a recipe feature outside veRL 0.9.1's trainer, so it is not applied",
    "ppo: GAE (gamma 1, lambda 0.95) with a critic initialised from model.path (critic.optim.lr = algorithm.lr x 10)",
    "reinforce_pp: veRL's reinforce_plus_plus estimator (batch-normalised returns)",
]


def needs_critic(name: str) -> bool:
    """True when the mapped estimator trains a value model."""
    return ALGORITHMS.get(name, {}).get("algorithm.adv_estimator") == "gae"
