"""Build TRL's GRPOTrainer around agentbridge's rollout; each step's episodes and logs go to the run logger."""

from __future__ import annotations

import time
from typing import Any

from agentbridge.rollout.agent import Agent
from agentbridge.rollout.agent_edge import fit_limits
from agentbridge.rollout.trajectory import Trajectory
from agentbridge.training.logger import RunLogger
from agentbridge_trl.config import make_grpo_config, reward_components
from agentbridge_trl.rollout import AgentRollout, prompt_row, reward_functions


def make_dataset(tasks: list[Any]) -> Any:
    from datasets import Dataset

    return Dataset.from_list([{"prompt": prompt_row(t)} for t in tasks])


def build_trainer(agent: Agent, model: Any, grpo_kwargs: dict[str, Any], train_tasks: list[Any],
                  logger: RunLogger | None = None) -> tuple[Any, AgentRollout]:
    """A GRPOTrainer whose rollouts are agentbridge episodes; returns it with its rollout function.

    For a vision-language model it is ``AgentVLMGRPOTrainer`` with the model's processor, so the images the
    episodes saw (prompt images, tool screenshots) reach every forward pass (``agentbridge_trl.vlm``). Either way
    its data order is fixed by the epoch, so ``train(resume_from_checkpoint=...)`` sees the same data as an
    uninterrupted run (``agentbridge_trl.resume``).
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
                logger.log(state.global_step, logs)

    trainer_cls, processing_class = agent_trainer_class(), agent.tokenizer
    if is_vlm_model(model):
        trainer_cls = vlm_trainer_class()
        processing_class = make_processor(model, agent.tokenizer, agent.renderer.image_processor)
    args = make_grpo_config(grpo_kwargs)
    # TRL keeps at most max_completion_length tokens of a completion: the driver's budgets stay inside it
    agent.limits = fit_limits(agent.limits, max_response=args.max_completion_length)
    trainer = resumable(trainer_cls)(model=model, reward_funcs=reward_functions(components), args=args,
                                     train_dataset=make_dataset(train_tasks), processing_class=processing_class,
                                     rollout_func=timed_rollout, callbacks=[LogCallback()])
    if logger is not None:  # the run logger and its progress display replace the trainer's printed dicts
        trainer.remove_callback(PrinterCallback)
    return trainer, rollout
