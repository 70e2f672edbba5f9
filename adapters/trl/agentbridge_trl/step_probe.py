"""TRL's side of the one-step conformance: one ``GRPOTrainer.train()`` step of the trainer the compiled job builds
(``build_trainer`` with the job's ``GRPOConfig`` arguments), from the step batch's weights and tokens.

Real: the training loop (``Trainer._inner_training_loop``: ``training_step``, ``_compute_loss`` with the model's
forward, the backward, ``_clip_grad_norm`` with ``max_grad_norm``, the optimizer ``create_optimizer`` builds and its
``step``, the scheduler). Stand-in: ``_prepare_inputs``, which would generate the batch, hands the loop the step
batch in the form ``_generate_and_score_completions`` returns it (prompt and completion ids and masks, the tool
mask, one advantage per sequence, old and reference log-probs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def step(job: Path, init: str, batch: dict[str, Any]) -> dict[str, Any]:
    """The loss, clipped gradients and parameter updates of one TRL training step on ``batch`` (see the module)."""
    import torch
    from transformers import AutoModelForCausalLM, TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from agentbridge.adapter.conformance import PROMPT
    from agentbridge.adapter.models import load_tokenizer
    from agentbridge.adapter.rollout import Agent
    from agentbridge.spec import load_spec
    from agentbridge_trl.trainer import build_trainer

    spec = load_spec(str(Path(job) / "spec.yaml"))
    kwargs = json.loads((Path(job) / "grpo_config.json").read_text())
    kwargs["output_dir"] = str(Path(job) / "trainer")
    agent = Agent.from_spec(spec, load_tokenizer(spec.model.path))
    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)
    trainer, _ = build_trainer(agent, model, kwargs, agent.tasks("train"))
    mask = batch["response_mask"]
    n = mask.shape[0]
    adv = batch["advantages"]
    seq_adv = torch.stack([adv[i][mask[i].bool()][0] for i in range(n)])  # TRL: one advantage per sequence
    inputs = {"prompt_ids": batch["input_ids"][:, :PROMPT], "prompt_mask": batch["attention_mask"][:, :PROMPT],
              "completion_ids": batch["input_ids"][:, PROMPT:], "completion_mask": batch["attention_mask"][:, PROMPT:],
              "tool_mask": mask, "advantages": seq_adv, "old_per_token_logps": batch["old_logp"],
              "ref_per_token_logps": batch["ref_logp"], "num_items_in_batch": mask.sum()}
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
