"""Held-out evaluation: greedy episodes through the same driver, success rate with a 95% interval."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from agentbridge.env import Task
from agentbridge.models import load_image_processor
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.hf_policy import HFPolicy
from agentbridge.rollout.hf_vlm_policy import HFVLMPolicy
from agentbridge.runs import mean_ci95


def evaluate(agent: Agent, model: Any, tasks: list[Task], *, component: str | None = None) -> dict[str, Any]:
    """Greedy success on ``tasks``: mean of the first reward component (the task's own score) ± 95% CI."""
    was_training = model.training
    model.eval()
    processor = load_image_processor(agent.spec.model.path) if getattr(model.config, "vision_config", None) else None
    policy = (HFVLMPolicy(model, agent.tokenizer, processor, max_batch=256) if processor is not None
              else HFPolicy(model, agent.tokenizer, max_batch=256))
    sampling = replace(agent.sampling, temperature=0.0)
    trajs = asyncio.run(agent.run(tasks, policy, concurrency=256, sampling=sampling))
    if was_training:
        model.train()
    name = component or agent.spec.reward[0].id
    scores = [t.reward_components.get(name, 0.0) for t in trajs]
    mean, half = mean_ci95(scores)
    return {"metric": name, "n": len(scores), "mean": mean, "ci95": half,
            "finish": {r: sum(t.finish_reason == r for t in trajs) for r in ("done", "max_turns", "length", "error")},
            "scores": scores}
