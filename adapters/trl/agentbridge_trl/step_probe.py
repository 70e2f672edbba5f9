"""TRL's side of the one-step conformance: one ``GRPOTrainer.train()`` step of the trainer the compiled job builds
(``build_trainer`` with the job's ``GRPOConfig`` arguments), from the step batch's weights and tokens.

Real: the training loop (``Trainer._inner_training_loop``: ``training_step``, ``_compute_loss`` with the model's
forward, the backward, ``_clip_grad_norm`` with ``max_grad_norm``, the optimizer ``create_optimizer`` builds and its
``step``, the scheduler). Stand-in: ``_prepare_inputs``, which would generate the batch, hands the loop the step
batch in the form ``_generate_and_score_completions`` returns it (prompt and completion ids and masks, the tool
mask, one advantage per sequence, old and reference log-probs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def step(job: Path, init: str, batch: dict[str, Any]) -> dict[str, Any]:
    """The loss, clipped gradients and parameter updates of one TRL training step on ``batch`` (see the module)."""
    import torch
    from transformers import AutoModelForCausalLM, TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from agentbridge.adapter.conformance import PROMPT
    from agentbridge_trl.algorithm_probe import job_trainer, loss_inputs

    _, _, trainer = job_trainer(job, AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32))
    ids, attention = batch["input_ids"], batch["attention_mask"]
    inputs = loss_inputs(ids[:, :PROMPT], attention[:, :PROMPT], ids[:, PROMPT:], attention[:, PROMPT:],
                         batch["response_mask"], batch["advantages"], batch["old_logp"], batch["ref_logp"])
    trainer._prepare_inputs = lambda _: inputs  # stand-in for generation: the step batch
    before = {k: p.detach().clone() for k, p in trainer.model.named_parameters()}
    seen: dict[str, Any] = {}

    class Capture(TrainerCallback):
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            seen["grad"] = {k: p.grad.detach().clone() for k, p in trainer.model.named_parameters()
                            if p.grad is not None}

    trainer.add_callback(Capture())
    for printer in (PrinterCallback, ProgressCallback):  # the step's log line would land in the caller's stdout
        trainer.remove_callback(printer)
    trainer.args.max_steps = 1
    output = trainer.train()
    update = {k: p.detach() - before[k] for k, p in trainer.model.named_parameters()}
    return {"loss": float(output.training_loss), "grad": seen["grad"], "update": update}
