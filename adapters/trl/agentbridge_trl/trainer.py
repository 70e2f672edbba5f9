"""Build TRL's GRPOTrainer around agentbridge's rollout, and log normalized metrics per step."""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path
from typing import Any

from agentbridge.rollout.agent import Agent
from agentbridge.rollout.trajectory import Trajectory
from agentbridge.runs import append_jsonl, episode_metrics
from agentbridge_trl.config import reward_components
from agentbridge_trl.rollout import AgentRollout, prompt_row, reward_functions

EPISODES_WITH_TOKENS_PER_STEP = 2  # full token-level trajectories kept per step in episodes.jsonl


def peak_memory_gb() -> float:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.max_memory_allocated() / 1e9
    except ImportError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / (1e9 if sys.platform == "darwin" else 1e6)


def make_dataset(tasks: list[Any]) -> Any:
    from datasets import Dataset

    return Dataset.from_list([{"prompt": prompt_row(t)} for t in tasks])


class RunLogger:
    """Collects each step's trajectories and writes ``metrics.jsonl`` / ``episodes.jsonl`` rows."""

    def __init__(self, run_dir: Path, on_row: Any = None) -> None:
        self.run_dir = run_dir
        self.pending: list[Trajectory] = []
        self.rollout_s = 0.0
        self.step_started = time.perf_counter()
        self.on_row = on_row
        self.rows: list[dict[str, float]] = []

    def add_batch(self, trajs: list[Trajectory], rollout_s: float) -> None:
        self.pending += trajs
        self.rollout_s += rollout_s

    def log(self, step: int, trl_logs: dict[str, float]) -> dict[str, float] | None:
        if not self.pending:
            return None
        trajs, self.pending = self.pending, []
        step_s = time.perf_counter() - self.step_started
        self.step_started = time.perf_counter()
        tokens = sum(len(t.response_ids) + len(t.prompt_ids) for t in trajs)
        row: dict[str, float] = {"step": step, **episode_metrics(trajs)}
        row.update({
            "time/step_s": step_s,
            "time/rollout_s": self.rollout_s,
            "time/generate_s": sum(t.metrics.get("time/generate_s", 0.0) for t in trajs) / len(trajs),
            "time/env_s": sum(t.metrics.get("time/env_s", 0.0) for t in trajs) / len(trajs),
            "throughput/tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
            "memory/peak_gb": peak_memory_gb(),
        })
        row.update({f"trl/{k}": float(v) for k, v in trl_logs.items() if isinstance(v, int | float)})
        self.rollout_s = 0.0
        append_jsonl(self.run_dir / "metrics.jsonl", row)
        for i, t in enumerate(trajs):
            append_jsonl(self.run_dir / "episodes.jsonl",
                         {"step": step, **t.to_dict(tokens=i < EPISODES_WITH_TOKENS_PER_STEP)})
        self.rows.append(row)
        if self.on_row is not None:
            self.on_row(row)
        return row


def load_model(path: str) -> Any:
    """The trainable model for ``model.path``: a causal LM, or an image-text-to-text model for a VLM."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from agentbridge.models import is_vlm, resolve_model_path

    local = resolve_model_path(path)
    auto = AutoModelForImageTextToText if is_vlm(local) else AutoModelForCausalLM
    return auto.from_pretrained(local)


def build_trainer(agent: Agent, model: Any, grpo_kwargs: dict[str, Any], train_tasks: list[Any],
                  logger: RunLogger | None = None) -> tuple[Any, AgentRollout]:
    """A GRPOTrainer whose rollouts are agentbridge episodes; returns it with its rollout function.

    For a vision-language model it is ``AgentVLMGRPOTrainer`` with the model's processor, so the images the
    episodes saw (prompt images, tool screenshots) reach every forward pass (``agentbridge_trl.vlm``).
    """
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

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

    trainer_cls, processing_class = GRPOTrainer, agent.tokenizer
    if is_vlm_model(model):
        trainer_cls = vlm_trainer_class()
        processing_class = make_processor(model, agent.tokenizer, agent.renderer.image_processor)
    trainer = trainer_cls(model=model, reward_funcs=reward_functions(components), args=GRPOConfig(**grpo_kwargs),
                          train_dataset=make_dataset(train_tasks), processing_class=processing_class,
                          rollout_func=timed_rollout, callbacks=[LogCallback()])
    if logger is not None:  # the run logger and its progress display replace the trainer's printed dicts
        trainer.remove_callback(PrinterCallback)
    return trainer, rollout
