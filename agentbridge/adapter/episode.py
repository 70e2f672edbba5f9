"""One episode inside a backend, the same way on every backend: the driver's agent with the backend's length
limits, the error-rate guard, the run's episode record, the training sample and the metrics.

A policy adapter builds one :class:`EpisodeRunner` per worker and calls :meth:`EpisodeRunner.run` per sample
(:meth:`EpisodeRunner.play` then :meth:`EpisodeRunner.finish` where the backend may drop an episode in between),
then converts the :class:`Episode` into the backend's own output type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentbridge.env import Task
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.agent_edge import ErrorRateGuard, fit_limits
from agentbridge.rollout.training import TrainingSequence, episode_metrics, episode_sample, shape_reward
from agentbridge.runs import record_episode
from agentbridge.spec import Spec
from agentbridge.trajectory import Trajectory


@dataclass
class Episode:
    """One finished episode: the task, the driver's trajectory, what the backend trains on, and its metrics."""

    task: Task
    trajectory: Trajectory
    sample: TrainingSequence
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def turns(self) -> int:
        """The conversation's messages other than the system prompt (what backends log as turns)."""
        return sum(1 for m in self.trajectory.messages if m.get("role") != "system")

    @property
    def info(self) -> dict[str, Any]:
        """Which task, how it ended, and its error (empty when none): what each backend keeps per sample."""
        traj = self.trajectory
        return {"task_id": traj.task_id, "finish_reason": traj.finish_reason, "error": traj.error or ""}


class EpisodeRunner:
    """The spec's agent for one worker of ``backend``, its budgets cut to what the backend keeps of a sequence
    (``max_prompt``, ``max_response``, ``max_total``: see :func:`agentbridge.rollout.agent_edge.fit_limits`)."""

    def __init__(self, spec: Spec, tokenizer: Any, backend: str, *, max_prompt: int | None = None,
                 max_response: int | None = None, max_total: int | None = None) -> None:
        self.agent = Agent(spec, tokenizer)
        self.agent.limits = fit_limits(self.agent.limits, max_prompt=max_prompt, max_response=max_response,
                                       max_total=max_total)
        self.guard = ErrorRateGuard(spec.agent.max_error_rate)
        self.backend = backend

    @property
    def spec(self) -> Spec:
        return self.agent.spec

    async def play(self, task: Task, policy: Any) -> Trajectory:
        """The driver's episode of ``task`` with the backend's engine as ``policy``."""
        (traj,) = await self.agent.run([task], policy, concurrency=1)
        return traj

    def finish(self, task: Task, traj: Trajectory, *, guard: bool = True) -> Episode:
        """Record the episode (the error guard and the overlong shaping of ``algorithm.overlong`` unless ``guard``
        is off, e.g. in evaluation; the run's episodes), and build what the backend trains on."""
        spec = self.agent.spec
        if guard:
            self.guard.record(traj)
            shape_reward(traj, spec)
        record_episode(traj, self.backend)
        sample = episode_sample(traj, task, self.agent.renderer, spec.agent.system_prompt, spec.algorithm.overlong)
        return Episode(task, traj, sample, episode_metrics(traj))

    async def run(self, task: Task, policy: Any) -> Episode:
        """:meth:`play` then :meth:`finish`."""
        return self.finish(task, await self.play(task, policy))
