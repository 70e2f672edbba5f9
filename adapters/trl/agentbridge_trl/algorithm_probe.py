"""TRL's side of the algorithm conformance: the golden batch through TRL 1.16's ``GRPOTrainer._compute_loss``, on
a trainer built from the compiled job's ``grpo_config.json``.

Real: the ``GRPOTrainer`` the job builds (``build_trainer`` with the job's ``GRPOConfig`` arguments, the spec's
tiny model) and its ``_compute_loss`` (ratio, clipping, importance-sampling level, KL estimator and ``beta``, loss
aggregation by ``loss_type``, its ``clip_ratio/region_mean`` and ``kl`` metrics). Stand-in: the model's forward
(``_get_per_token_logps_and_entropies`` returns the golden batch's current log-probs). Not probed: TRL's
advantages (computed inline in ``_generate_and_score_completions``, between generation and scoring); TRL has no
dynamic sampling, so every group is kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# what TRL cannot be configured to do as agentbridge's reference does: algorithm -> quantity -> (why, KL-on only)
DIFFERENCES: dict[str, dict[str, tuple[str, bool]]] = {
    "dapo": {"kept": ("GRPOTrainer has no dynamic sampling; groups whose rewards are all equal are trained on "
                      "(with zero advantage)", False)},
}

def probe(job: Path, batch: Any) -> dict[str, Any]:
    """The algorithm quantities TRL computes for ``batch`` under the job in ``job``."""
    import torch

    from agentbridge.conformance.algorithms import reference_advantages
    from agentbridge.models import load_model
    from agentbridge.rollout.agent import Agent
    from agentbridge.spec import load_spec
    from agentbridge_trl.trainer import build_trainer

    spec = load_spec(str(Path(job) / "spec.yaml"))
    kwargs = json.loads((Path(job) / "grpo_config.json").read_text())
    kwargs["output_dir"] = str(Path(job) / "trainer")
    agent = Agent.from_spec(spec)
    trainer, _ = build_trainer(agent, load_model(spec.model.path), kwargs, agent.tasks("train"))
    t = batch.tensors()
    n, width = t["mask"].shape
    lengths = torch.tensor([len(m) - m[::-1].index(1) for m in batch.mask])
    completion_mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()

    def forward_stand_in(*_: Any, **__: Any) -> tuple[Any, Any, None]:
        return t["logp"], torch.zeros_like(t["logp"]), None

    trainer._get_per_token_logps_and_entropies = forward_stand_in
    ref_adv = reference_advantages(spec.algorithm.name, batch.tensors(dtype=torch.float64), spec.algorithm.kl_coef)
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
    return {"loss": loss, "clip_fraction": float(clip), "kl": total - loss, "kept": batch.groups()}
