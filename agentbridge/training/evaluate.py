"""Held-out evaluation: greedy episodes through the same driver, success with a Wilson interval per task set."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any

from agentbridge.env import Task
from agentbridge.rollout.agent import Agent
from agentbridge.training.stats import wilson_interval
from agentbridge.trajectory import FINISH_REASONS


@dataclass
class EvalResult:
    """Success of one checkpoint on a task set: per-task scores (in task order) and their summary."""

    metric: str
    task_ids: list[str]
    scores: list[float]
    finish: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    groups: list[str] = field(default_factory=list)   # each task's ``data["group"]`` ("" when it has none)
    components: dict[str, list[float]] = field(default_factory=dict)  # every other reward component, per task

    @property
    def n(self) -> int:
        return len(self.scores)

    @property
    def successes(self) -> int:
        return sum(s >= 0.5 for s in self.scores)

    @property
    def mean(self) -> float:
        return self.successes / self.n if self.n else 0.0

    def by_group(self) -> dict[str, float]:
        """Success per task group (``Task.data["group"]``), e.g. one- and two-step problems; empty without groups."""
        if len(set(self.groups)) < 2:
            return {}
        out: dict[str, list[float]] = {}
        for group, score in zip(self.groups, self.scores, strict=True):
            out.setdefault(group, []).append(score >= 0.5)
        return {g: sum(v) / len(v) for g, v in sorted(out.items())}

    def summary(self) -> dict[str, Any]:
        """The ``eval.json`` object of one arm: mean, n and the 95% Wilson interval, plus how episodes ended."""
        low, high = wilson_interval(self.successes, self.n)
        out = {"metric": self.metric, "mean": self.mean, "n": self.n, "ci95_low": low, "ci95_high": high,
               "finish": self.finish, "seconds": round(self.seconds, 2)}
        if groups := self.by_group():
            out["by_group"] = groups
        if self.components:
            out["components"] = {name: sum(v) / len(v) if v else 0.0 for name, v in self.components.items()}
        return out


def greedy_policy(agent: Agent, model: Any, max_batch: int = 256) -> Any:
    """The ``hf`` policy (or its VLM variant) over ``model`` as it is now."""
    from agentbridge.models import load_image_processor
    from agentbridge.rollout.hf_policy import HFPolicy
    from agentbridge.rollout.hf_vlm_policy import HFVLMPolicy

    if getattr(model.config, "vision_config", None) is not None:
        processor = load_image_processor(agent.spec.model.path)
        return HFVLMPolicy(model, agent.tokenizer, processor, max_batch=max_batch)
    return HFPolicy(model, agent.tokenizer, max_batch=max_batch)


def evaluate(agent: Agent, model: Any, tasks: list[Task], *, component: str | None = None) -> EvalResult:
    """Greedy success on ``tasks``: the first reward component (the task's own score) of each episode; the other
    components' scores are kept beside it (``EvalResult.components``)."""
    started = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        sampling = replace(agent.sampling, temperature=0.0)
        trajs = asyncio.run(agent.run(tasks, greedy_policy(agent, model), concurrency=256, sampling=sampling))
    finally:
        if was_training:
            model.train()
    name = component or agent.spec.reward[0].id
    others = [r.id for r in agent.spec.reward if r.id != name]
    return EvalResult(metric=name, task_ids=[t.id for t in tasks],
                      scores=[float(t.reward_components.get(name, 0.0)) for t in trajs],
                      finish={r: sum(t.finish_reason == r for t in trajs) for r in FINISH_REASONS},
                      seconds=time.perf_counter() - started,
                      groups=[str(t.data.get("group", "")) for t in tasks],
                      components={c: [float(t.reward_components.get(c, 0.0)) for t in trajs] for c in others})
