"""ROLL's side of the algorithm conformance: the golden batch through ROLL's own agentic training math, configured by
the compiled job's ``AgenticConfig`` (the job's Hydra config built with ``dacite``, as its entry builds it).

Real: the steps ``AgenticPipeline.run`` takes between the rollout batch and the actor, on the golden batch laid out
as ROLL's trajectories (one prompt token, then the responses; ``response_mask[:, 1:]`` is the golden mask; the
reward in ``scores`` on the last token): ``get_agentic_response_level_mask``, ``compute_response_level_rewards``
(ROLL's reward normalisation), ``compute_token_reward`` (KL in the reward, with ROLL's KL controller) and
``agentic_compute_advantage``; then the loss of ROLL's agentic ``ActorWorker.loss_func`` on the reference
advantages, its model's log-probs standing in as the golden batch's (the forward pass needs no GPU to skip: only the
log-probs matter). The groups kept are those agentbridge's group filter keeps. Not run: the pipeline's workers.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agentbridge.adapter.conformance import Documented

# what ROLL cannot be configured to do as the reference does: algorithm -> quantity -> Documented (pinned)
_CLIPFRAC = ("ROLL's actor/clipfrac is aggregated with the job's loss_agg_mode ({}), not as a token mean over the "
             "batch")
_KL_REWARD = ("ROLL subtracts init_kl_coef x the token's KL estimate from each token's reward after normalising the "
              "response-level rewards in their group (compute_token_reward after compute_response_level_rewards), and "
              "its grpo advantage is the token-level return (compute_reinforce_return): each token's advantage is the "
              "normalised reward minus the KL summed from that token on, where the reference subtracts the KL summed "
              "over the sequence from the reward before the group normalisation")
_IS_MASK = ("mask is ROLL's ratio filter (train_infer_correction.filters: a weight above cap leaves response_mask) "
            "with the unbounded weight: {}; on this job's path (enable_old_logprobs_recompute off: the actor filters "
            "inside loss_func, after the batch's counts). With recompute on (init_kl_coef > 0, or several backward "
            "steps a step) the pipeline filters first and a masked sequence leaves global_valid_samples too")
DIFFERENCES: dict[str, dict[str, Documented]] = {
    "grpo": {"clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean: per sequence, then over sequences"),
                                         off=1.210e-2, on=1.210e-2)},
    "dr_grpo": {
        "loss": Documented("seq-mean-token-sum-norm divides the summed token losses by the batch's padded width (ROLL "
                           "pads every trajectory to sequence_length), not by sequences x max_response_tokens",
                           off=6.403e-2, on=6.403e-2),
        "kl": Documented("the KL term is aggregated as the loss is (by the padded width)", off=None, on=1.656e-2),
        "clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-sum-norm: token sums over the padded width"),
                                    off=0.4365, on=0.4365)},
    "reinforce_pp": {
        "advantages": Documented("masked_whiten uses the unbiased (n-1) variance, as rsqrt(var + 1e-8)",
                                 off=1.764e-2, on=1.784e-2)},
    "ppo": {
        "advantages": Documented("ROLL's GAE runs over every response position, environment tokens included (the "
                                 "reference skips them), and masked_whiten uses the unbiased (n-1) variance",
                                 off=8.112e-2, on=8.132e-2)},
    # the recipe axis (grpo, KL off; agentbridge.conformance.algorithms.RECIPE_CASES): each knob reaches ROLL's
    # advantages and loss (they are the reference's); its logged clip fraction follows the job's loss_agg_mode
    "grpo@clip_higher": {"clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean: per sequence, then over "
                                                                      "sequences"), off=6.647e-3, on=None)},
    "grpo@dual_clip": {"clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean: per sequence, then over "
                                                                    "sequences"), off=1.210e-2, on=None)},
    "grpo@seq_mean_token_sum": {"clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-sum: each sequence's "
                                                                             "count of clipped tokens, then the mean"),
                                                            off=0.2698, on=None)},
    "grpo@scale_none": {"clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean: per sequence, then over "
                                                                     "sequences"), off=1.210e-2, on=None)},
    "grpo@scale_batch": {"clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean: per sequence, then over "
                                                                      "sequences"), off=1.210e-2, on=None)},
    # KL in the reward (add_token_level_kl, init_kl_coef, kl_penalty kl): ROLL's own placement
    "grpo@kl_in_reward": {
        "advantages": Documented(_KL_REWARD, off=None, on=1.453),
        "clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean: per sequence, then over sequences"),
                                    off=None, on=2.778e-2)},
    # IS correction (train_infer_correction): the weight multiplies each token's pg loss as the reference's does
    "grpo@is_token_truncate": {"clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean: per sequence, then "
                                                                            "over sequences"), off=1.210e-2, on=None)},
    "grpo@is_sequence_truncate": {"clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean: per sequence, "
                                                                               "then over sequences"),
                                                              off=1.210e-2, on=None)},
    "grpo@is_token_mask": {
        "loss": Documented(_IS_MASK.format("a masked token leaves its sequence's token mean (the reference keeps it "
                                           "there with weight 0)"), off=9.136e-4, on=None),
        "clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean") + ", over the tokens the filter keeps",
                                    off=1.488e-2, on=None)},
    "grpo@is_sequence_mask": {
        "clip_fraction": Documented(_CLIPFRAC.format("seq-mean-token-mean") + ", over the sequences the filter keeps "
                                    "(" + _IS_MASK.format("a masked sequence adds 0 to the sequence mean, whose "
                                                          "denominator still counts it: the reference's loss") + ")",
                                    off=4.683e-2, on=None)},
}
NOT_PRODUCED: dict[str, str] = {}  # quantity -> why not: none, each is read from ROLL's code


def _batch(batch: Any) -> Any:
    """The golden batch as ROLL's rollout batch (``DataProto``): a one-token prompt, then each response."""
    import numpy as np
    import torch
    from roll.distributed.scheduler.protocol import DataProto

    t = batch.tensors()
    mask = t["mask"]
    n, width = mask.shape
    last = width - 1 - torch.fliplr(mask).argmax(dim=1)  # each response's last action token
    full = torch.zeros((n, width + 1), dtype=torch.long)
    for i in range(n):
        full[i, : int(last[i]) + 2] = 1  # the prompt token and the response through its last action token
    response_mask = torch.cat([torch.zeros((n, 1), dtype=torch.long), mask], dim=1)
    scores = torch.zeros((n, width + 1), dtype=torch.float32)
    scores[torch.arange(n), last + 1] = t["rewards"].float()
    data = DataProto.from_dict({
        "input_ids": torch.ones((n, width + 1), dtype=torch.long), "attention_mask": full,
        "position_ids": (full.cumsum(dim=-1) - 1).clamp(min=0), "response_mask": response_mask,
        "prompt_mask": torch.cat([torch.ones((n, 1)), torch.zeros((n, width))], dim=1).bool(), "scores": scores,
        "old_log_probs": t["old_logp"].float(), "ref_log_probs": t["ref_logp"].float(),
        "infer_logprobs": t["rollout_logp"].float(), "values": t["values"].float()})
    groups = [str(g) for g in t["group"].tolist()]
    steps = np.empty(n, dtype=object)
    for i, r in enumerate(t["rewards"].tolist()):
        steps[i] = [float(r)]
    data.non_tensor_batch.update({
        "traj_group_id": np.array(groups, dtype=object), "traj_id": np.array([f"{g}_{i}" for i, g in
                                                                              enumerate(groups)], dtype=object),
        "tags": np.array(["agentbridge"] * n, dtype=object),
        "episode_scores": np.array([float(r) for r in t["rewards"].tolist()], dtype=object), "step_scores": steps})
    return data


def _loss(config: Any, data: Any, logp: Any, advantages: Any) -> dict[str, float]:
    """ROLL's agentic actor loss (``ActorWorker.loss_func``) with ``advantages``, the model's log-probs ``logp``."""
    import torch
    from roll.pipeline.agentic.agentic_actor_worker import ActorWorker

    worker = ActorWorker.__new__(ActorWorker)
    worker.pipeline_config = config
    worker.strategy = SimpleNamespace(op_compute_log_probs=lambda **_: logp,
                                      op_compute_entropy=lambda **_: torch.zeros_like(logp))
    mask = data.batch["response_mask"][:, 1:]
    data.batch["advantages"] = advantages
    data.meta_info["batch_num_tokens"] = {"response_mask": int(mask.sum())}
    data.meta_info["global_valid_samples"] = {"response_mask": int((mask.sum(-1) > 0).sum())}
    _, metrics = worker.loss_func(data, output_tensor=None)
    kl = metrics["actor/kl_loss@sum"] * config.kl_loss_coef if config.use_kl_loss else 0.0
    return {"loss": float(metrics["actor/pg_loss@sum"]), "clip_fraction": float(metrics["actor/clipfrac@sum"]),
            "kl": float(kl)}


def probe(job: Path, batch: Any) -> dict[str, Any]:
    """The algorithm quantities ROLL computes for ``batch`` under the job in ``job`` (see the core's module)."""
    from agentbridge_roll import keep_roll_logs_out_of_cwd

    keep_roll_logs_out_of_cwd()  # before ROLL's first import
    from roll.pipeline.agentic.utils import (
        agentic_compute_advantage,
        compute_response_level_rewards,
        get_agentic_response_level_mask,
    )
    from roll.utils.functionals import compute_token_reward
    from roll.utils.kl_controller import get_kl_controller

    from agentbridge.spec import load_spec
    from agentbridge_roll.layout import EqualScoresFilter
    from agentbridge_roll.validate import build_config, compose_job

    spec = load_spec(str(Path(job) / "spec.yaml"))
    config = build_config(compose_job(Path(job), "model"))
    data = _batch(batch)
    data, _ = get_agentic_response_level_mask(data, config)
    data, _ = compute_response_level_rewards(batch=data, pipeline_config=config)
    kl_ctrl = get_kl_controller(init_kl_coef=config.init_kl_coef, target_kl=config.target_kl,
                                kl_horizon=config.kl_horizon)
    data, _ = compute_token_reward(data, config, kl_ctrl)
    data = agentic_compute_advantage(data=data, gamma=config.gamma, lambd=config.lambd,
                                     adv_estimator=config.adv_estimator, advantage_clip=config.advantage_clip,
                                     whiten_advantages=config.whiten_advantages, whiten_rewards=config.whiten_rewards,
                                     pipeline_config=config)
    if config.enable_old_logprobs_recompute:  # as AgenticPipeline.run, before the actor's train step
        from roll.utils.train_infer_corrections import apply_train_infer_correction_to_batch

        data, _ = apply_train_infer_correction_to_batch(config, data, update_mask_keys=["response_mask"])
    mask = data.batch["response_mask"][:, 1:].float()
    advantages = (data.batch["advantages"] * mask).tolist()
    quantities = _loss(config, data, batch.tensors()["logp"].float(), batch.advantages(spec.algorithm))
    groups = batch.groups()
    if config.train_env_manager.group_filter_cls.endswith("EqualScoresFilter"):
        keep = EqualScoresFilter(config, config.train_env_manager, "train")
        t = batch.tensors()
        by_group = {g: [SimpleNamespace(non_tensor_batch={"episode_scores": [float(r)]})
                        for r, gg in zip(t["rewards"].tolist(), t["group"].tolist(), strict=True) if gg == g]
                    for g in groups}
        kept = [g for g in groups if not keep.filter(g, 0, by_group[g])]
    else:
        kept = groups
    return {"advantages": advantages, **quantities, "kept": kept}
