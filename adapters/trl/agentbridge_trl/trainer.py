"""Build TRL's GRPOTrainer around agentbridge's rollout; each step's episodes and logs go to the run logger."""

from __future__ import annotations

import time
from typing import Any

from agentbridge.adapter.rollout import Agent, Trajectory, fit_limits
from agentbridge.adapter.training import RunLogger
from agentbridge_trl.config import make_grpo_config, reward_components
from agentbridge_trl.rollout import AgentRollout, prompt_row, reward_functions

NORMALIZED = {  # TRL's logged name -> agentbridge's (agentbridge.runs.IS_METRIC_NAMES); the others stay under trl/
    # TRL 1.16's grpo_trainer.py, with vllm_importance_sampling_correction on a vLLM trainer
    "sampling/importance_sampling_ratio/mean": "is/weight_mean",  # the weight after truncation or masking
    "sampling/sampling_logp_difference/mean": "is/logp_abs_diff",  # mean |old - sampling log-prob|
}


def lora_config(spec: Any) -> Any:
    """PEFT's ``LoraConfig`` for ``model.lora`` (None without it): TRL wraps the model in a new adapter and, with
    a KL term, takes the reference log-probs with the adapter disabled (the base model the adapter trains on)."""
    lora = spec.model.lora
    if lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=lora.rank, lora_alpha=lora.scaling_alpha(), lora_dropout=lora.dropout,
                      target_modules=lora.target_modules if lora.target_modules == "all-linear"
                      else list(lora.target_modules), task_type="CAUSAL_LM")


def merge_lora(model: Any) -> Any:
    """The plain transformers model with the trained adapter merged into its weights (``model`` is the trainer's
    PEFT model, possibly wrapped for several processes). The layers PEFT wrapped in place are put back, so the
    model the job loaded is this model again, every weight trainable as before (the SFT-only control trains it)."""
    from accelerate.utils import extract_model_from_parallel

    merged = extract_model_from_parallel(model).merge_and_unload()
    for param in merged.parameters():
        param.requires_grad_(True)
    return merged


def merge_adapter(model: Any, adapter_dir: Any) -> Any:
    """``model`` (the base the adapter trained on) with the adapter saved in ``adapter_dir`` (a trainer checkpoint)
    merged into it: a plain transformers model."""
    from peft import PeftModel

    return merge_lora(PeftModel.from_pretrained(model, str(adapter_dir)))


def lora_info(spec: Any) -> dict[str, Any] | None:
    """What a run's manifest and its saved model record about ``model.lora`` (None without it)."""
    lora = spec.model.lora
    if lora is None:
        return None
    return {"rank": lora.rank, "alpha": lora.scaling_alpha(), "dropout": lora.dropout,
            "target_modules": lora.target_modules, "merged": True}


MODEL_INFO = "model_info.json"


def write_model_info(model_dir: Any, spec: Any, base: str) -> None:
    """``model_info.json`` beside a saved model trained with ``model.lora``: the weights are the base with the
    adapter merged in, and the trainer's checkpoints hold the adapter alone."""
    import json
    from pathlib import Path

    info = lora_info(spec)
    if info is None:
        return
    note = {"lora": info, "weights": "merged: the base model's weights with the trained LoRA adapter folded in; "
                                     "loads with transformers alone, no adapter",
            "base": base,
            "trainer_checkpoints": "RUN_DIR/trainer/checkpoint-N hold the LoRA adapter's weights only "
                                   "(adapter_model.safetensors, adapter_config.json), to apply to the base"}
    (Path(model_dir) / MODEL_INFO).write_text(json.dumps(note, indent=2) + "\n")


def make_dataset(tasks: list[Any]) -> Any:
    from datasets import Dataset

    return Dataset.from_list([{"prompt": prompt_row(t)} for t in tasks])


def build_trainer(agent: Agent, model: Any, grpo_kwargs: dict[str, Any], train_tasks: list[Any],
                  logger: RunLogger | None = None) -> tuple[Any, AgentRollout]:
    """A GRPOTrainer whose rollouts are agentbridge episodes; returns it with its rollout function.

    For a vision-language model it is ``AgentVLMGRPOTrainer`` with the model's processor, so the images the
    episodes saw (prompt images, tool screenshots) reach every forward pass (``agentbridge_trl.vlm``). Either way
    its data order is fixed by the epoch, so ``train(resume_from_checkpoint=...)`` sees the same data as an
    uninterrupted run (``agentbridge_trl.resume``). With ``model.lora`` TRL trains a new LoRA adapter on ``model``
    (:func:`lora_config`; its layers are wrapped in place, :func:`merge_lora` folds the adapter back in).
    """
    from transformers import PrinterCallback, TrainerCallback

    from agentbridge_trl.resume import resumable
    from agentbridge_trl.shared_prefix import agent_trainer_class
    from agentbridge_trl.vlm import is_vlm_model, make_processor, vlm_trainer_class

    components = [name for name, _ in reward_components(agent.spec)]
    timer = {"t": 0.0}

    def on_batch(trajs: list[Trajectory]) -> None:
        if logger is not None:
            logger.add_batch(trajs, time.perf_counter() - timer["t"])

    rollout = AgentRollout(agent, components, on_batch=on_batch)

    def timed_rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        timer["t"] = time.perf_counter()
        return rollout(prompts, trainer)

    class LogCallback(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            if logger is not None and logs is not None and "loss" in logs:
                logger.log(state.global_step, logs, NORMALIZED)

    trainer_cls, processing_class = agent_trainer_class(), agent.tokenizer
    if is_vlm_model(model):
        trainer_cls = vlm_trainer_class()
        processing_class = make_processor(model, agent.tokenizer, agent.renderer.image_processor)
    args = make_grpo_config(grpo_kwargs)
    # TRL keeps at most max_completion_length tokens of a completion: the driver's budgets stay inside it
    agent.limits = fit_limits(agent.limits, max_response=args.max_completion_length)
    trainer = resumable(trainer_cls)(model=model, reward_funcs=reward_functions(components), args=args,
                                     train_dataset=make_dataset(train_tasks), processing_class=processing_class,
                                     rollout_func=timed_rollout, callbacks=[LogCallback()],
                                     peft_config=lora_config(agent.spec))
    if logger is not None:  # the run logger and its progress display replace the trainer's printed dicts
        trainer.remove_callback(PrinterCallback)
    return trainer, rollout
