"""agentbridge's rollout driver inside TRL: a ``rollout_func`` and the generators it drives.

Each prompt TRL hands over carries its task (a JSON string in the user message's ``task`` field). For each
one the driver runs a full episode with TRL's generator: vLLM when the trainer uses it, the training model's
``generate`` otherwise (with ``model.lora``, its base model's, whose layers carry the adapter). The result is
TRL's rollout dict: ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (the driver's ``response_mask``)
and one extra key per reward component. When episodes saw images
(prompt images, tool screenshots) it also returns them per sample under ``ab_images``, for the VLM trainer
(``agentbridge_trl.vlm``) to put in the forward pass.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from agentbridge import Task
from agentbridge.adapter.rollout import (
    Agent,
    BatchingPolicy,
    Generation,
    HFPolicy,
    SamplingParams,
    TrainingSequence,
    Trajectory,
    component_values,
    cut_at_eos,
    episode_sample,
    shape_reward,
)
from agentbridge_trl.config import reward_key

IMAGES_KEY = "ab_images"  # per-sample images of a rollout, in placeholder order (read by the VLM trainer)


def prompt_row(task: Task) -> list[dict[str, str]]:
    """The dataset ``prompt`` for a task: one user message that carries the task itself."""
    return [{"role": "user", "content": task.prompt, "task": json.dumps(task.to_dict(), sort_keys=True)}]


def task_of(prompt: list[dict[str, Any]]) -> Task:
    for message in prompt:
        if message.get("task"):
            return Task.from_dict(json.loads(message["task"]))
    raise ValueError("a prompt reached the rollout without its task; build the dataset with prompt_row()")


class VLLMPolicy(BatchingPolicy):
    """TRL's vLLM generator (colocate or server), one completion per request."""

    def __init__(self, vllm_generation: Any, eos_id: int, max_batch: int = 256) -> None:
        super().__init__(max_batch)
        self.vg = vllm_generation
        self.eos_id = eos_id

    def generate_batch(self, prompts: list[list[int]], budgets: list[int], sampling: SamplingParams,
                       images: list[list[Any] | None] | None) -> list[Generation]:
        self.vg.max_completion_length = max(budgets)  # the per-turn budget of this batch
        _, completions, logprobs, _ = self.vg.generate(prompts=prompts, images=images, num_generations=1)
        return [cut_at_eos(list(ids), [float(lp[0]) if lp and lp[0] is not None else 0.0 for lp in lps], budget,
                           self.eos_id)
                for ids, lps, budget in zip(completions, logprobs, budgets, strict=True)]


class AgentRollout:
    """``rollout_func(prompts, trainer)`` running agentbridge's driver; keeps the last batch for inspection."""

    def __init__(self, agent: Agent, components: list[str], *, concurrency: int = 256,
                 on_batch: Callable[[list[Trajectory]], None] | None = None) -> None:
        self.agent = agent
        self.components = components
        self.concurrency = concurrency
        self.on_batch = on_batch
        self.last: list[Trajectory] = []
        self.seen_task_ids: list[str] = []

    def policy(self, trainer: Any, model: Any) -> BatchingPolicy:
        if getattr(trainer, "use_vllm", False):
            return VLLMPolicy(trainer.vllm_generation, self.agent.renderer.eos_token_id)
        if getattr(trainer, "_is_vlm", False):
            from agentbridge.adapter.rollout import HFVLMPolicy

            return HFVLMPolicy(model, self.agent.tokenizer, trainer.processing_class.image_processor,
                               max_batch=self.concurrency)
        return HFPolicy(model, self.agent.tokenizer, max_batch=self.concurrency)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from trl.models.utils import unwrap_model_for_generation

        tasks = [task_of(p) for p in prompts]
        self.seen_task_ids += [t.id for t in tasks]
        from agentbridge_trl.shared_prefix import hf_model
        from agentbridge_trl.zero import unsynced_generation, uses_deepspeed

        gather = getattr(trainer.args, "ds3_gather_for_generation", True)
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=gather) as model:
            # weights gathered whole on each rank: each rank's episodes generate on their own, as many times as
            # they need (ZeRO-3 with gathering off keeps transformers' lockstep over the ranks)
            with unsynced_generation() if uses_deepspeed(trainer) and gather else nullcontext():
                trajs = asyncio.run(self.agent.run(tasks, self.policy(trainer, hf_model(model)),
                                                   concurrency=self.concurrency))
        spec = self.agent.spec
        for traj in trajs:
            shape_reward(traj, spec)
        self.last = trajs
        if self.on_batch is not None:
            self.on_batch(trajs)
        samples = [episode_sample(tr, t, self.agent.renderer, spec.agent.system_prompt, spec.algorithm.overlong)
                   for t, tr in zip(tasks, trajs, strict=True)]
        return to_rollout_output(trajs, samples, self.components)


def to_rollout_output(trajs: list[Trajectory], samples: list[TrainingSequence],
                      components: list[str]) -> dict[str, Any]:
    """TRL's rollout dict from driver trajectories and their samples (an empty episode is the core's fallback
    sample, :func:`agentbridge.rollout.training.episode_sample`: one EOS with mask 0)."""
    out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
    for seq in samples:
        out["prompt_ids"].append(seq.prompt_ids)
        out["completion_ids"].append(seq.response_ids)
        out["env_mask"].append(seq.response_mask)
        out["logprobs"].append(seq.logprobs)
    values = [component_values(t, components) for t in trajs]
    for name in components:
        out[reward_key(name)] = [v[name] for v in values]
    if any(t.images for t in trajs):
        out[IMAGES_KEY] = [list(t.images) if t.prompt_ids else [] for t in trajs]  # ids and images agree
    return out


def reward_functions(components: list[str]) -> list[Callable[..., list[float]]]:
    """One TRL reward function per driver component, named uniquely; each reads its rollout extra key."""
    funcs = []
    for name in components:
        key = reward_key(name)

        def read(completions: list[Any], _key: str = key, **kwargs: Any) -> list[float]:
            return [float(v) for v in kwargs[_key]]

        read.__name__ = key
        read.__qualname__ = key
        funcs.append(read)
    return funcs
