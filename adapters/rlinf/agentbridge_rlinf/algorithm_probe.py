"""RLinf's side of the algorithm conformance: the golden batch through RLinf 0.3.0's own reasoning-path math,
configured by the compiled job's ``algorithm`` section (the job's Hydra config composed as ``launch.sh`` composes it).

Real: ``calculate_adv_and_returns`` (RLinf's registry entry, ``task_type: reasoning``) with the arguments
``FSDPActor.compute_advantages_and_returns`` passes (``adv_type``, ``group_size``, ``reinpp_kl_beta``,
``kl_penalty_type``, the recomputed log-probs as ``logprob`` where the job recomputes them, else the rollout's,
``use_reinpp_baseline``); then, on the reference advantages, what ``FSDPActor.training_step`` does per micro-batch of
``algorithm.training_batch_size_per_gpu`` sequences: its importance-sampling fix (``importance_sampling_fix``: the
advantages times ``clamp(exp(recomputed_logprobs - rollout_logprobs), max=importance_sampling_clip)``, here the
golden ``old_logp`` and ``rollout_logp``), ``policy_loss`` (the registered ``loss_type``, the clip ratios resolved
from ``ratio_clip_eps`` / ``clip_ratio_*``, ``clip_ratio_c``, ``get_loss_agg_func(loss_agg_func)``) and the KL loss
(``kl_penalty(ref_logprobs, logprobs, kl_penalty_type)`` aggregated the same way, times ``kl_beta``), averaged over
the micro-batches as gradient accumulation does. The golden log-probs stand in for the model's forward pass. Not
run: the workers, Ray. ``training_step`` itself cannot run here (RLinf 0.3.0's FSDP actor module imports a class
transformers 5 removed, and accelerate), so the probe repeats its glue around RLinf's functions, and first checks
that the installed ``fsdp_actor_worker.py`` still holds the lines it repeats (:data:`ACTOR_LINES`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from agentbridge.adapter.conformance import Documented

# what RLinf cannot be configured to do as the reference does: algorithm -> quantity -> Documented (pinned)
_KL_ORDER = ("the actor calls kl_penalty(ref_logprobs, logprobs, 'low_var_kl'): the k3 estimator with the policies "
             "swapped (exp(logp - ref) - (logp - ref) - 1), not exp(ref - logp) - (ref - logp) - 1")
_MICRO = ("token-mean is taken within each micro-batch (algorithm.training_batch_size_per_gpu sequences, "
          "resources.micro_batch_size or backend.options.micro_batch_size) and gradient accumulation averages the "
          "micro-batches: the batch's token mean only when one micro-batch holds a GPU's whole step "
          "(use_valid_token_scale is read by nothing in RLinf 0.3.0)")
_CLIP_MICRO = ("actor/clip_fraction is the share of clipped tokens within each micro-batch (algorithm."
               "training_batch_size_per_gpu sequences), averaged over the micro-batches: the batch's token share only "
               "when one micro-batch holds a GPU's whole step")
DIFFERENCES: dict[str, dict[str, Documented]] = {
    "grpo": {"kl": Documented(_KL_ORDER, off=None, on=8.754e-5),
             "clip_fraction": Documented(_CLIP_MICRO, off=1.210e-2, on=1.210e-2)},
    "dapo": {
        "loss": Documented(_MICRO, off=2.391e-2, on=2.391e-2),
        "kl": Documented(_KL_ORDER + ", aggregated per micro-batch as the loss is", off=None, on=1.544e-4),
        "kept": Documented("RLinf 0.3.0's runners have no dynamic-sampling filter: groups with equal rewards are "
                           "trained on", off=2, on=2),
        "clip_fraction": Documented(_CLIP_MICRO, off=1.210e-2, on=1.210e-2)},
    "reinforce_pp": {
        "loss": Documented(_MICRO, off=2.638e-2, on=2.633e-2),
        "advantages": Documented("compute_reinpp_advantages subtracts reinpp_kl_beta x k1 at every position, "
                                 "environment tokens inside a response included, before the returns (the reference "
                                 "masks them out)", off=None, on=5.530e-2),
        "clip_fraction": Documented(_CLIP_MICRO, off=2.282e-2, on=2.282e-2)},
    # the recipe axis (grpo, KL off; agentbridge.conformance.algorithms.RECIPE_CASES): the knob reaches RLinf's
    # policy_loss (its loss is the reference's), the logged clip fraction stays per micro-batch
    "grpo@clip_higher": {"clip_fraction": Documented(_CLIP_MICRO, off=6.647e-3, on=None)},
    "grpo@dual_clip": {"clip_fraction": Documented(_CLIP_MICRO, off=1.210e-2, on=None)},
    "grpo@token_mean": {"loss": Documented(_MICRO + "; with one sequence per micro-batch the token mean is each "
                                           "sequence's, so the loss is seq-mean-token-mean's", off=2.377e-2, on=None),
                        "clip_fraction": Documented(_CLIP_MICRO, off=1.210e-2, on=None)},
    "grpo@seq_mean_token_sum": {"clip_fraction": Documented(_CLIP_MICRO, off=1.210e-2, on=None)},
    # k2 is symmetric in its arguments, so the actor's swapped kl_penalty call is the reference's k2 (KL 10: on)
    "grpo@kl_k2": {"clip_fraction": Documented(_CLIP_MICRO, off=None, on=1.210e-2)},
    # importance_sampling_fix scales the advantages by the truncated token weight: the same per-token loss (the
    # weight is positive), the same clipped tokens
    "grpo@is_token_truncate": {"clip_fraction": Documented(_CLIP_MICRO, off=1.210e-2, on=None)},
}
NOT_PRODUCED: dict[str, str] = {}  # quantity -> why not: none, each is read from RLinf's code


# the lines of RLinf 0.3.0's FSDPActor.training_step (rlinf/workers/actor/fsdp_actor_worker.py) the probe repeats
ACTOR_LINES = (
    'old_logprobs = m_batch.get("recomputed_logprobs")',
    'old_logprobs = m_batch["rollout_logprobs"]',
    "advantages = advantages * torch.clamp(",
    "(recomputed_logprobs - rollout_logprobs).exp(),",
    "max=self.cfg.algorithm.importance_sampling_clip,",
    "kld = kl_penalty(ref_logprobs, logprobs, self.kl_penalty_type)",
    "kl_loss = self.loss_agg_func(kld, loss_mask)",
    "loss = loss + kl_loss * self.kl_beta",
)


def actor_source_problems() -> list[str]:
    """The :data:`ACTOR_LINES` the installed RLinf's ``fsdp_actor_worker.py`` does not hold (read, not imported)."""
    spec = importlib.util.find_spec("rlinf")
    if spec is None or spec.origin is None:
        return ["rlinf is not installed"]
    text = (Path(spec.origin).parent / "workers" / "actor" / "fsdp_actor_worker.py").read_text()
    return [line for line in ACTOR_LINES if line not in text]


def _algorithm_config(job: Path) -> Any:
    """The job's ``algorithm`` section, composed as the entry composes it."""
    from agentbridge_rlinf.validate import compose_job

    return compose_job(Path(job), "MODEL_PATH_SET_BY_LAUNCH").algorithm


def _old_logprobs(algo: Any, t: dict[str, Any]) -> tuple[Any, Any]:
    """``(recomputed_logprobs or None, rollout_logprobs or None)`` as RLinf's runner hands them to the actor: the
    trainer's (golden ``old_logp``) where the job recomputes them (``recompute_logprobs``, which
    ``validate_reasoning_cfg`` turns on with ``importance_sampling_fix``), the engine's where the agent loop keeps
    them (without recompute they are the old log-probs: golden ``old_logp``; with the IS fix agentbridge's agent loop
    keeps them beside the recomputed ones: golden ``rollout_logp``)."""
    fix = bool(algo.get("importance_sampling_fix", False))
    if algo.recompute_logprobs or fix:
        return t["old_logp"].float(), (t["rollout_logp"].float() if fix else None)
    return None, t["old_logp"].float()


def _advantages(algo: Any, t: dict[str, Any]) -> Any:
    """RLinf's advantages of the golden batch, as ``FSDPActor.compute_advantages_and_returns`` computes them."""
    import rlinf.algorithms.advantages  # noqa: F401 - registers RLinf's advantages
    from rlinf.algorithms.registry import calculate_adv_and_returns

    recomputed, rollout = _old_logprobs(algo, t)
    advantages, _ = calculate_adv_and_returns(
        task_type="reasoning", adv_type=algo.adv_type, rewards=t["rewards"].float(),
        loss_mask=t["mask"].bool(), group_size=algo.group_size, kl_beta=algo.get("reinpp_kl_beta", 0.0),
        kl_penalty_type=algo.kl_penalty_type, logprob=recomputed if recomputed is not None else rollout,
        ref_logprob=t["ref_logp"].float(), use_reinpp_baseline=algo.get("use_reinpp_baseline", False))
    return advantages


def _loss(algo: Any, t: dict[str, Any], advantages: Any) -> dict[str, float]:
    """``FSDPActor.training_step``'s policy and KL losses, per micro-batch, averaged over the micro-batches."""
    import rlinf.algorithms.losses  # noqa: F401 - registers RLinf's losses
    import torch
    from rlinf.algorithms.registry import policy_loss
    from rlinf.algorithms.utils import kl_penalty
    from rlinf.utils.utils import get_loss_agg_func

    agg = get_loss_agg_func(algo.loss_agg_func)
    clip = algo.ratio_clip_eps
    low = algo.get("clip_ratio_low", None)
    high = algo.get("clip_ratio_high", None)
    micro = int(algo.get("training_batch_size_per_gpu", 1))
    recomputed, rollout = _old_logprobs(algo, t)
    old = recomputed if recomputed is not None else rollout
    losses, kls, clipped = [], [], []
    for start in range(0, len(t["mask"]), micro):
        rows = slice(start, start + micro)
        logprobs, mask, adv = t["logp"][rows].float(), t["mask"][rows].bool(), advantages[rows].float()
        if algo.get("importance_sampling_fix", False):
            adv = adv * torch.clamp((recomputed[rows] - rollout[rows]).exp(), max=algo.importance_sampling_clip)
        loss, metrics = policy_loss(
            task_type="reasoning", loss_type=algo.loss_type, loss_agg_func=agg, logprobs=logprobs,
            old_logprobs=old[rows], advantages=adv,
            clip_ratio_c=algo.get("clip_ratio_c", 3.0), clip_ratio_low=low if low is not None else clip,
            clip_ratio_high=high if high is not None else clip, loss_mask=mask,
            clip_log_ratio_min=algo.get("clip_log_ratio_min", None),
            clip_log_ratio_max=algo.get("clip_log_ratio_max", None), fast_path_zero_loss_mask=True)
        kl = torch.zeros(())
        if algo.kl_beta > 0:
            kl = agg(kl_penalty(t["ref_logp"][rows].float(), logprobs, algo.kl_penalty_type), mask) * algo.kl_beta
        losses.append(loss)
        kls.append(kl)
        clipped.append(metrics["actor/clip_fraction"])
    return {"loss": float(torch.stack(losses).mean()), "kl": float(torch.stack(kls).mean()),
            "clip_fraction": float(torch.stack([c.float() for c in clipped]).mean())}


def probe(job: Path, batch: Any) -> dict[str, Any]:
    """The algorithm quantities RLinf computes for ``batch`` under the job in ``job`` (see the core's module)."""
    from agentbridge.spec import load_spec

    stale = actor_source_problems()
    if stale:
        raise RuntimeError(f"RLinf's FSDPActor.training_step no longer holds what the probe repeats: {stale[0]}")
    spec = load_spec(str(Path(job) / "spec.yaml"))
    algo = _algorithm_config(Path(job))
    t = batch.tensors()
    mask = t["mask"].float()
    advantages = (_advantages(algo, t).float() * mask).tolist()
    # RLinf trains on every group (no dynamic-sampling filter in its runners)
    return {"advantages": advantages, **_loss(algo, t, batch.advantages(spec.algorithm)), "kept": batch.groups()}
