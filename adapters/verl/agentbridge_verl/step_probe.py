"""veRL's side of the one-step conformance: one actor update of veRL 0.9.1's own update code around a plain module,
configured by the compiled job's trainer config (``main_ppo``'s Hydra compose of the job directory).

veRL 0.9.1 has no ``DataParallelPPOActor``: the actor update is ``TrainingWorker.train_mini_batch`` →
``FSDPEngine.train_batch``, and the engine wraps the module in FSDP on the accelerator's device mesh, so it is not
run here. What it runs per mini-batch is: ``verl.workers.utils.losses.ppo_loss`` (the loss function the actor
worker sets: ``get_policy_loss_fn(loss_mode)``, ``agg_loss`` with the global batch info, the KL loss), the backward,
gradient clipping to ``optim.clip_grad`` and the optimizer ``build_optimizer`` makes from the job's
``actor.optim`` — all real here, on the plain HF module (float32 forward; veRL's ``log_probs`` as the engine hands
them, one per unpadded token). The batch is one mini-batch of one micro-batch on one data-parallel rank, as the
job's ``ppo_mini_batch_size`` makes it for three groups of four.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def step(job: Path, init: str, batch: dict[str, Any]) -> dict[str, Any]:
    """The loss, clipped gradients and parameter updates of one veRL actor update on ``batch``."""
    import torch
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config.optimizer import build_optimizer
    from verl.workers.utils.losses import ppo_loss

    from agentbridge.adapter.conformance import PROMPT, response_logp, train_step
    from agentbridge.spec import load_spec
    from agentbridge_verl.validate import compose_job

    spec = load_spec(str(Path(job) / "spec.yaml"))
    cfg = compose_job(Path(job), spec, "model")
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    optim = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor.optim)
    n, width = batch["response_mask"].shape
    mask = batch["response_mask"]
    data = TensorDict({"prompts": batch["input_ids"][:, :PROMPT], "responses": batch["input_ids"][:, PROMPT:],
                       "attention_mask": batch["attention_mask"], "response_mask": mask,
                       "old_log_probs": batch["old_logp"], "advantages": batch["advantages"],
                       "ref_log_prob": batch["ref_logp"]}, batch_size=[n])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=n)

    def loss_of(model: Any) -> Any:
        logp = response_logp(model, batch["input_ids"], batch["attention_mask"], width)
        # the engine's output: one log-prob per unpadded token (the one predicting the next token)
        full = torch.zeros(n, PROMPT + width, dtype=logp.dtype)
        full = torch.cat([full[:, :PROMPT - 1], logp, full[:, -1:]], 1)
        return ppo_loss(actor, {"log_probs": full[batch["attention_mask"].bool()]}, data)[0]

    return train_step(init, loss_of, lambda model: build_optimizer(model.parameters(), optim), float(optim.clip_grad))
