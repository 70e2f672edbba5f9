"""TRL's side of the algorithm conformance: the golden batch through TRL 1.16's ``GRPOTrainer._compute_loss``, on
a trainer built from the compiled job's ``grpo_config.json``.

Real: the ``GRPOTrainer`` the job builds (``build_trainer`` with the job's ``GRPOConfig`` arguments, the spec's
tiny model) and its ``_compute_loss`` (ratio, clipping, importance-sampling level, KL estimator and ``beta``, loss
aggregation by ``loss_type``, the vLLM importance-sampling weight, its ``clip_ratio/region_mean`` and ``kl``
metrics), and its advantages and vLLM importance-sampling ratio as ``_generate_and_score_completions`` computes
them from the reward functions' outputs and the rollout's log-probs. Stand-ins: the model's forward
(``_get_per_token_logps_and_entropies`` returns the golden batch's log-probs: the old ones while scoring, the
reference's for the reference model, the current ones in the loss) and the ``rollout_func`` (returns the golden
responses, rewards and the engine's log-probs ``rollout_logp``). TRL computes the importance-sampling ratio only
when it generates with vLLM, so where the spec sets ``algorithm.is_correction`` the probe runs the trainer as a
vLLM one (``use_vllm``, the rollout's log-probs standing for vLLM's); the CPU job applies no correction, which its
compile note says. TRL has no dynamic sampling: every group is kept.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from agentbridge.adapter.conformance import Documented

# what TRL cannot be configured to do as the reference does: algorithm -> quantity -> Documented (pinned)
# The recipe cases TRL's check refuses (kl_k1, kl_k2, kl_in_reward: TrlBackend.recipe_why_not) are n/a, not pinned here.
DIFFERENCES: dict[str, dict[str, Documented]] = {
    "dapo": {"kept": Documented("GRPOTrainer has no dynamic sampling; groups whose rewards are all equal are trained "
                                "on (with zero advantage)", off=2, on=2)},
    "gspo": {"clip_fraction": Documented("with importance_sampling_level sequence, GRPOTrainer logs "
                                         "clip_ratio/region_mean over sequences, not over tokens",
                                         off=0.03968, on=0.03968)},
}
NOT_PRODUCED: dict[str, str] = {}  # quantity -> why not: none, each is read from TRL's code
_LOADED: dict[str, tuple[Any, Any]] = {}


def probe(job: Path, batch: Any) -> dict[str, Any]:
    """The algorithm quantities TRL computes for ``batch`` under the job in ``job``."""
    import torch

    spec, kwargs, trainer = job_trainer(job)
    # TRL's importance-sampling code runs only with vLLM: where the spec asks for the correction, the trainer runs
    # as a vLLM one, the golden rollout_logp standing for vLLM's log-probs
    trainer.use_vllm = spec.algorithm.is_correction is not None
    t = batch.tensors()
    n, width = t["mask"].shape
    completion_mask = (torch.arange(width).unsqueeze(0) < torch.tensor(batch.lengths()).unsqueeze(1)).long()

    def scoring_stand_in(model: Any, *_: Any, **__: Any) -> tuple[Any, Any, None]:
        logp = t["ref_logp"] if model is trainer.ref_model and model is not None else t["old_logp"]
        return logp, torch.zeros_like(logp), None

    def forward_stand_in(*_: Any, **__: Any) -> tuple[Any, Any, None]:
        return t["logp"], torch.zeros_like(t["logp"]), None

    trainer._get_per_token_logps_and_entropies = scoring_stand_in
    scored = score(trainer, batch, spec)
    trainer._get_per_token_logps_and_entropies = forward_stand_in
    ones = torch.ones(n, 1, dtype=torch.long)
    inputs = loss_inputs(ones, ones, torch.ones(n, width, dtype=torch.long), completion_mask, t["mask"],
                         batch.advantages(spec.algorithm), t["old_logp"], t["ref_logp"])
    if "importance_sampling_ratio" in scored:  # TRL's own weights from the rollout's (the engine's) log-probs
        inputs["importance_sampling_ratio"] = scored["importance_sampling_ratio"]
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = int(kwargs.get("gradient_accumulation_steps", 1))  # set by train()
    with torch.no_grad():
        total = float(trainer._compute_loss(trainer.model, inputs))
        clip = trainer._metrics["train"]["clip_ratio/region_mean"][-1]
        beta, trainer.beta = trainer.beta, 0.0
        loss = float(trainer._compute_loss(trainer.model, inputs))
        trainer.beta = beta
    adv = scored["advantages"].reshape(n).tolist()
    return {"advantages": [[a * m for m in batch.mask[i]] for i, a in enumerate(adv)], "loss": loss,
            "clip_fraction": float(clip), "kl": total - loss, "kept": batch.groups()}


def job_trainer(job: Path, model: Any = None) -> tuple[Any, dict[str, Any], Any]:
    """``(spec, GRPOConfig arguments, GRPOTrainer)`` of the job in ``job``, as its entry builds the trainer (on a
    copy of the spec's model, or on ``model``)."""
    from agentbridge.adapter.models import load_model, load_tokenizer
    from agentbridge.adapter.rollout import Agent
    from agentbridge.spec import load_spec
    from agentbridge_trl.trainer import build_trainer

    spec = load_spec(str(Path(job) / "spec.yaml"))
    kwargs = json.loads((Path(job) / "grpo_config.json").read_text())
    kwargs["output_dir"] = str(Path(job) / "trainer")
    if spec.model.path not in _LOADED:  # one load per process: the probe builds a trainer per algorithm
        _LOADED[spec.model.path] = (load_tokenizer(spec.model.path), load_model(spec.model.path))
    tokenizer, loaded = _LOADED[spec.model.path]
    agent = Agent.from_spec(spec, tokenizer)
    trainer, _ = build_trainer(agent, copy.deepcopy(loaded) if model is None else model, kwargs, agent.tasks("train"))
    return spec, kwargs, trainer


def loss_inputs(prompt_ids: Any, prompt_mask: Any, completion_ids: Any, completion_mask: Any, tool_mask: Any,
                advantages: Any, old_logp: Any, ref_logp: Any) -> dict[str, Any]:
    """A batch as ``_generate_and_score_completions`` hands it to ``_compute_loss``: one advantage per sequence
    (TRL's: each sequence's first action token's of the per-token ``advantages``)."""
    import torch

    seq_adv = torch.stack([advantages[i][tool_mask[i].bool()][0] for i in range(len(tool_mask))])
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask, "tool_mask": tool_mask, "advantages": seq_adv,
            "old_per_token_logps": old_logp, "ref_per_token_logps": ref_logp, "num_items_in_batch": tool_mask.sum()}


def score(trainer: Any, batch: Any, spec: Any) -> dict[str, Any]:
    """TRL's own ``_generate_and_score_completions`` on one prompt per group, ``num_generations`` times, with a
    stand-in ``rollout_func`` returning the golden responses, their engine log-probs (``rollout_logp``) and the
    golden reward as the first reward component (the others 0): its advantages (one per sequence) and, on a vLLM
    trainer, its ``importance_sampling_ratio``."""
    from agentbridge_trl.config import reward_components, reward_key

    components = reward_components(spec)
    eos = trainer.processing_class.eos_token_id if hasattr(trainer.processing_class, "eos_token_id") else 0
    engine = batch.rollout_logp or batch.old_logp

    def rollout_stand_in(prompts: list[Any], _: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_ids": [[eos] for _ in prompts], "completion_ids": [], "logprobs": [],
                               "env_mask": []}
        for i in range(len(prompts)):
            length = len(batch.mask[i]) - batch.mask[i][::-1].index(1)
            out["completion_ids"].append([eos] * length)
            out["logprobs"].append(list(engine[i][:length]))
            out["env_mask"].append(list(batch.mask[i][:length]))
        for k, (name, weight) in enumerate(components):
            out[reward_key(name)] = [r / weight if k == 0 else 0.0 for r in batch.rewards]
        return out

    trainer.rollout_func = rollout_stand_in
    trainer._last_loaded_step = trainer.state.global_step  # no vLLM weights to sync
    rows = [dict(trainer.train_dataset[g]) for g in batch.group]  # one dataset row per group, as RepeatSampler does
    trainer.model.train()
    return trainer._generate_and_score_completions(rows)

