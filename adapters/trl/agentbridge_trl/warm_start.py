"""Warm start: supervised fine-tuning with TRL's SFTTrainer on the environment's scripted demonstrations.

Demonstrations are driver trajectories of the scripted expert, so the SFT data has exactly the tokens and
masks RL will see: loss on the policy's tokens (``response_mask == 1``), none on prompts or tool output.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.rollout.trajectory import Trajectory
from agentbridge.spec.models import WarmStartSpec


def demonstrations(agent: Agent, n: int) -> list[Trajectory]:
    """``n`` scripted-expert episodes on the training tasks; only solved, self-terminated ones are kept."""
    tasks = agent.tasks("train", size=n)
    trajs = asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)))
    return [t for t in trajs if t.finish_reason == "done" and t.reward > 0]


def sft_rows(trajs: list[Trajectory]) -> list[dict[str, list[int]]]:
    """Pre-tokenized SFT rows: ``input_ids`` and ``labels`` (-100 outside the policy's own tokens)."""
    return [{"input_ids": t.prompt_ids + t.response_ids,
             "labels": [-100] * len(t.prompt_ids) + [i if m else -100 for i, m in zip(t.response_ids,
                                                                                      t.response_mask, strict=True)]}
            for t in trajs]


def shared_prefix_length(input_ids: Any, attention_mask: Any) -> int:
    """How many leading tokens every row of the batch shares (and attends to)."""

    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    return int(same.long().cumprod(0).sum().item()) if same.numel() else 0


def prefix_shared_loss(model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Any:
    """Causal-LM loss that runs the batch's shared prefix (system prompt, tools) once, not once per row.

    The prefix's key/value cache is computed for one row and repeated over the batch; gradients flow back
    through it, so loss and gradients equal the plain forward's while the prefix costs 1/B of the compute.
    """
    import torch

    ids, labels = inputs["input_ids"], inputs["labels"]
    attention = inputs.get("attention_mask")
    attention = torch.ones_like(ids) if attention is None else attention
    shared = min(shared_prefix_length(ids, attention), ids.size(1) - 1)
    if shared < 2:
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
        targets = labels[:, 1:]
    else:
        prefix = model(input_ids=ids[:1, :shared], use_cache=True)
        cache = prefix.cache
        cache.batch_repeat_interleave(ids.size(0))
        rest = model(input_ids=ids[:, shared:], attention_mask=attention, cache=cache).logits
        logits = torch.cat([prefix.logits[:, -1:].expand(ids.size(0), -1, -1), rest[:, :-1]], dim=1)
        targets = labels[:, shared:]
    total = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                                              ignore_index=-100, reduction="sum")
    count = num_items_in_batch if num_items_in_batch is not None else (targets != -100).sum()
    return total / count


def warm_start(model: Any, tokenizer: Any, trajs: list[Trajectory], ws: WarmStartSpec, out_dir: Path, *,
               seed: int = 0, use_cpu: bool = True,
               on_step: Callable[[int, int, float | None], None] | None = None) -> dict[str, float]:
    """Train ``model`` in place on the demonstrations; returns steps, seconds and the last loss."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    steps_per_epoch = max(1, len(trajs) // ws.batch_size)
    total = steps_per_epoch * ws.epochs
    started = time.perf_counter()
    losses: list[float] = []

    class Progress(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if on_step is not None:
                on_step(state.global_step, total, losses[-1] if losses else None)
            if ws.max_minutes is not None and time.perf_counter() - started > ws.max_minutes * 60:
                control.should_training_stop = True

    class PrefixSharedSFTTrainer(SFTTrainer):
        """SFTTrainer whose loss computes the demonstrations' shared prompt prefix once per batch."""

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            loss = prefix_shared_loss(model, inputs, num_items_in_batch)
            return (loss, None) if return_outputs else loss

    config = SFTConfig(output_dir=str(out_dir), per_device_train_batch_size=ws.batch_size, learning_rate=ws.lr,
                       max_steps=total, lr_scheduler_type="constant_with_warmup", warmup_steps=min(20, total // 10),
                       logging_steps=10, save_strategy="no", report_to="none", seed=seed, data_seed=seed,
                       use_cpu=use_cpu, bf16=not use_cpu, disable_tqdm=True, max_length=None,
                       activation_checkpointing=False)
    trainer = PrefixSharedSFTTrainer(model=model, args=config, train_dataset=Dataset.from_list(sft_rows(trajs)),
                         processing_class=tokenizer, callbacks=[Progress()])
    trainer.remove_callback(PrinterCallback)  # progress is shown by the caller
    result = trainer.train()
    return {"steps": float(result.global_step), "seconds": time.perf_counter() - started,
            "loss": losses[-1] if losses else float("nan"), "demonstrations": float(len(trajs))}
