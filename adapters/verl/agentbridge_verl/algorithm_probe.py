"""veRL's side of the algorithm conformance: the golden batch through veRL 0.9.1's own ``core_algos``, configured
by the compiled job's trainer config (``main_ppo``'s Hydra compose of the job directory).

Real: the composed ``algorithm`` and ``actor`` configs (``AlgoConfig``, ``ActorConfig`` via veRL's
``omega_conf_to_dataclass``); the V1 trainer's ``_compute_advantage`` steps in its order on a ``DataProto`` of the
batch: ``ray_trainer.apply_kl_penalty`` with ``core_algos.get_kl_controller(algorithm.kl_ctrl)`` when
``algorithm.use_kl_in_reward`` (the old log-probs against the reference's), then
``rollout_corr_helper.compute_rollout_correction_and_add_to_batch`` with ``algorithm.rollout_correction`` (the golden
batch's ``rollout_logp`` as the rollout's ``rollout_log_probs``, its ``old_logp`` as the trainer's
``old_log_probs``), then ``get_adv_estimator_fn`` with the arguments ``compute_advantage`` passes; the policy loss
as ``workers.utils.losses.ppo_loss`` calls it: ``get_policy_loss_fn(loss_mode)`` with the batch's
``rollout_is_weights`` and (rejection-sampled) ``response_mask``, ``kl_penalty`` and ``agg_loss`` for the KL loss.
The batch is padded to the job's ``data.max_response_length``, as the trainer pads every response. The groups kept
are those the V1 trainer's ``ReplayBuffer`` does not evict (``_dapo_filtered_keys`` under the job's
``algorithm.filter_groups``), the golden batch's rewards standing in for the ``rm_scores`` it reads from
TransferQueue. Not run: the trainer loop (it needs GPU workers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentbridge.adapter.conformance import Documented

# what veRL cannot be configured to do as the reference does: algorithm -> quantity -> Documented (pinned)
DIFFERENCES: dict[str, dict[str, Documented]] = {
    "reinforce_pp": {
        "advantages": Documented("masked_whiten uses the unbiased (n-1) variance; with KL on, veRL's KL is a loss "
                                 "term, not a k1 penalty in the token rewards", off=1.764e-2, on=4.489e-2),
        "kl": Documented("k3 (low_var_kl) in the loss instead of k1 in the reward", off=None, on=2.108e-3)},
    "ppo": {
        "advantages": Documented("GAE advantages are whitened with the unbiased (n-1) variance; with KL on, veRL's KL "
                                 "is a loss term, not a k1 penalty in the token rewards", off=1.743e-2, on=4.093e-2),
        "kl": Documented("k3 (low_var_kl) in the loss instead of k1 in the reward", off=None, on=2.108e-3)},
}
NOT_PRODUCED: dict[str, str] = {}  # quantity -> why not: none, each is read from veRL's code


def probe(job: Path, batch: Any) -> dict[str, Any]:
    """The algorithm quantities veRL computes for ``batch`` under the job in ``job`` (see the core's module)."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import apply_kl_penalty
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
    from verl.utils.config import omega_conf_to_dataclass

    from agentbridge.spec import load_spec
    from agentbridge_verl.validate import compose_job

    spec = load_spec(str(Path(job) / "spec.yaml"))
    cfg = compose_job(Path(job), spec, "model")
    width = int(cfg.data.max_response_length)
    t = batch.tensors(width)
    mask = t["mask"].float()
    index = np.array([str(g) for g in t["group"].tolist()], dtype=object)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    estimator = cfg.algorithm.adv_estimator
    scores = torch.zeros_like(mask)
    last = width - 1 - torch.fliplr(t["mask"]).argmax(dim=1)
    scores[torch.arange(len(scores)), last] = t["rewards"]
    # the V1 trainer's _compute_advantage: KL in the reward, the rollout correction, then the advantage
    data = DataProto.from_dict(tensors={
        "response_mask": mask, "token_level_scores": scores, "old_log_probs": t["old_logp"],
        "ref_log_prob": t["ref_logp"], "rollout_log_probs": t["rollout_logp"]}, non_tensors={"uid": index})
    if cfg.algorithm.use_kl_in_reward:
        data, _ = apply_kl_penalty(data, kl_ctrl=core_algos.get_kl_controller(cfg.algorithm.kl_ctrl),
                                   kl_penalty=cfg.algorithm.kl_penalty)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    rollout_correction = cfg.algorithm.get("rollout_correction", None)
    if rollout_correction is not None and not rollout_correction.get("bypass_mode", False):
        data, _ = compute_rollout_correction_and_add_to_batch(data, rollout_correction)
    mask, rewards = data.batch["response_mask"], data.batch["token_level_rewards"]
    fn = core_algos.get_adv_estimator_fn(estimator)
    if estimator == "gae":
        adv, _ = fn(token_level_rewards=rewards, values=t["values"], response_mask=mask,
                    gamma=cfg.algorithm.gamma, lam=cfg.algorithm.lam)
    else:
        kwargs: dict[str, Any] = {"token_level_rewards": rewards, "response_mask": mask, "config": algo,
                                  "index": index}
        if estimator == "grpo":
            kwargs["norm_adv_by_std_in_grpo"] = cfg.algorithm.norm_adv_by_std_in_grpo
        adv, _ = fn(**kwargs)
    actor_cfg = cfg.actor_rollout_ref.actor
    actor = omega_conf_to_dataclass(actor_cfg)
    mode = actor_cfg.get("loss_agg_mode", "token-mean")
    loss_mode = actor_cfg.policy_loss.get("loss_mode", "vanilla")
    loss, metrics = core_algos.get_policy_loss_fn(loss_mode)(
        old_log_prob=t["old_logp"], log_prob=t["logp"], advantages=batch.advantages(spec.algorithm, width),
        response_mask=mask.bool(),
        loss_agg_mode=mode, config=actor, rollout_is_weights=data.batch.get("rollout_is_weights", None))
    kl = 0.0
    if actor_cfg.use_kl_loss:
        kld = core_algos.kl_penalty(logprob=t["logp"], ref_logprob=t["ref_logp"], kl_penalty=actor_cfg.kl_loss_type)
        kl = float(core_algos.agg_loss(loss_mat=kld, loss_mask=mask.bool(), loss_agg_mode=mode)) \
            * actor_cfg.kl_loss_coef
    n = len(batch.mask[0])
    return {"advantages": (adv * mask)[:, :n].tolist(), "loss": float(loss),
            "clip_fraction": float(metrics["actor/pg_clipfrac"]), "kl": kl,
            "kept": kept_groups(cfg, batch.groups(), t["group"].tolist(), t["rewards"].tolist())}


def kept_groups(cfg: Any, groups: list[int], group_of: list[int], rewards: list[float]) -> list[int]:
    """The groups the V1 trainer trains on: those its ``ReplayBuffer`` does not evict as DAPO-filtered, each
    trajectory's reward standing in for the ``rm_scores`` the buffer reads from TransferQueue."""
    from unittest.mock import patch

    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import replay_buffer

    filter_groups = cfg.algorithm.get("filter_groups") or {}
    if not filter_groups.get("enable", False):
        return groups
    buffer = replay_buffer.ReplayBuffer(
        trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
        max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}), refill_fn=lambda *_: None,
        filter_groups_metric=str(filter_groups.get("metric")), train_batch_size=len(groups), gen_batch_size=1)
    scores = {f"{g}_{i}": torch.tensor([r]) for i, (g, r) in enumerate(zip(group_of, rewards, strict=True))}
    buffer.partitions["train"] = {key: {} for key in scores}
    buffer.finished_keys["train"] = {str(g) for g in groups}

    def kv_batch_get(keys: list[str], partition_id: str, select_fields: list[str]) -> dict[str, list[Any]]:
        return {"rm_scores": [scores[k] for k in keys]}

    with patch.object(replay_buffer.tq, "kv_batch_get", kv_batch_get):
        evicted, _ = buffer._dapo_filtered_keys("train")
    return [g for g in groups if str(g) not in evicted]
