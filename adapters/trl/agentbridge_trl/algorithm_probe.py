"""TRL's side of the algorithm conformance: the golden batch through TRL 1.16's ``GRPOTrainer._compute_loss``, on
a trainer built from the compiled job's ``grpo_config.json``.

Real: the ``GRPOTrainer`` the job builds (``build_trainer`` with the job's ``GRPOConfig`` arguments, the spec's
tiny model) and its ``_compute_loss`` (ratio, clipping, importance-sampling level, KL estimator and ``beta``, loss
aggregation by ``loss_type``, its ``clip_ratio/region_mean`` and ``kl`` metrics), and its advantages as
``_generate_and_score_completions`` computes them from the reward functions' outputs. Stand-ins: the model's
forward in the loss (``_get_per_token_logps_and_entropies`` returns the golden batch's current log-probs) and
the ``rollout_func`` (returns the golden responses and rewards). TRL has no dynamic sampling: every group is kept.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from agentbridge.conformance.algorithms import Documented

# what TRL cannot be configured to do as agentbridge's reference does: algorithm -> quantity -> why, pinned at its
# max |Δ| on the golden batch with KL off and on (None: no difference in that variant)
DIFFERENCES: dict[str, dict[str, Documented]] = {
    "dapo": {"kept": Documented("GRPOTrainer has no dynamic sampling; groups whose rewards are all equal are trained "
                                "on (with zero advantage)", off=2, on=2)},
    "gspo": {"clip_fraction": Documented("with importance_sampling_level sequence, GRPOTrainer logs "
                                         "clip_ratio/region_mean over sequences, not over tokens",
                                         off=0.03968, on=0.03968)},
}
# the quantities TRL's probe cannot produce: quantity -> why (none: every one is read from TRL's own code)
NOT_PRODUCED: dict[str, str] = {}
_LOADED: dict[str, tuple[Any, Any]] = {}


def probe(job: Path, batch: Any) -> dict[str, Any]:
    """The algorithm quantities TRL computes for ``batch`` under the job in ``job``."""
    import torch

    from agentbridge.conformance.algorithms import Recipe, reference_advantages
    from agentbridge.models import load_model, load_tokenizer
    from agentbridge.rollout.agent import Agent
    from agentbridge.spec import load_spec
    from agentbridge_trl.trainer import build_trainer

    spec = load_spec(str(Path(job) / "spec.yaml"))
    kwargs = json.loads((Path(job) / "grpo_config.json").read_text())
    kwargs["output_dir"] = str(Path(job) / "trainer")
    if spec.model.path not in _LOADED:  # one load per process: the probe builds a trainer per algorithm
        _LOADED[spec.model.path] = (load_tokenizer(spec.model.path), load_model(spec.model.path))
    tokenizer, model = _LOADED[spec.model.path]
    agent = Agent.from_spec(spec, tokenizer)
    trainer, _ = build_trainer(agent, copy.deepcopy(model), kwargs, agent.tasks("train"))
    t = batch.tensors()
    n, width = t["mask"].shape
    lengths = torch.tensor([len(m) - m[::-1].index(1) for m in batch.mask])
    completion_mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()

    def forward_stand_in(*_: Any, **__: Any) -> tuple[Any, Any, None]:
        return t["logp"], torch.zeros_like(t["logp"]), None

    advantages = _advantages(trainer, batch, spec)
    trainer._get_per_token_logps_and_entropies = forward_stand_in
    ref_adv = reference_advantages(spec.algorithm.name, batch.tensors(dtype=torch.float64), spec.algorithm.kl_coef,
                                   Recipe.of(spec.algorithm))
    seq_adv = torch.stack([ref_adv[i][t["mask"][i].bool()][0] for i in range(n)]).float()  # one per sequence
    inputs = {"prompt_ids": torch.ones(n, 1, dtype=torch.long), "prompt_mask": torch.ones(n, 1, dtype=torch.long),
              "completion_ids": torch.ones(n, width, dtype=torch.long), "completion_mask": completion_mask,
              "tool_mask": t["mask"], "advantages": seq_adv, "old_per_token_logps": t["old_logp"],
              "ref_per_token_logps": t["ref_logp"], "num_items_in_batch": t["mask"].sum()}
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = int(kwargs.get("gradient_accumulation_steps", 1))  # set by train()
    with torch.no_grad():
        total = float(trainer._compute_loss(trainer.model, inputs))
        clip = trainer._metrics["train"]["clip_ratio/region_mean"][-1]
        beta, trainer.beta = trainer.beta, 0.0
        loss = float(trainer._compute_loss(trainer.model, inputs))
        trainer.beta = beta
    return {"advantages": advantages, "loss": loss, "clip_fraction": float(clip), "kl": total - loss,
            "kept": batch.groups()}


def _advantages(trainer: Any, batch: Any, spec: Any) -> list[list[float]]:
    """TRL's own advantages for the golden rewards: ``_generate_and_score_completions`` on one prompt per group,
    ``num_generations`` times, with a stand-in ``rollout_func`` returning the golden responses and the golden
    reward as the first reward component (the others 0); the per-sequence advantage is broadcast over the mask."""
    from agentbridge_trl.config import reward_components, reward_key

    components = reward_components(spec)
    n = len(batch.rewards)
    eos = trainer.processing_class.eos_token_id if hasattr(trainer.processing_class, "eos_token_id") else 0

    def rollout_stand_in(prompts: list[Any], _: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_ids": [[eos] for _ in prompts], "completion_ids": [], "logprobs": [],
                               "env_mask": []}
        for i in range(len(prompts)):
            length = len(batch.mask[i]) - batch.mask[i][::-1].index(1)
            out["completion_ids"].append([eos] * length)
            out["logprobs"].append(list(batch.old_logp[i][:length]))
            out["env_mask"].append(list(batch.mask[i][:length]))
        for k, (name, weight) in enumerate(components):
            out[reward_key(name)] = [r / weight if k == 0 else 0.0 for r in batch.rewards]
        return out

    trainer.rollout_func = rollout_stand_in
    rows = [dict(trainer.train_dataset[g]) for g in batch.group]  # one dataset row per group, as RepeatSampler does
    trainer.model.train()
    out = trainer._generate_and_score_completions(rows)
    adv = out["advantages"].reshape(n).tolist()
    return [[a * m for m in batch.mask[i]] for i, a in enumerate(adv)]
