"""veRL reward function for agentbridge jobs.

The driver scores every episode inside the agent loop (``AgentLoopOutput.reward_score``), so veRL's reward loop
skips those samples. This function is the wiring ``reward.custom_reward_function`` points at: it returns the
driver's score carried in ``extra_info`` and refuses samples that did not come from agentbridge's loop.
"""

from __future__ import annotations

from typing import Any

from agentbridge.adapter.rollout import Trajectory, component_values, reward_components
from agentbridge.spec.schema import Spec

REWARD_INFO_KEY = "reward_extra_info"


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  **kwargs: Any) -> dict[str, float]:
    """The driver's reward components for one sample (``score`` is the weighted total)."""
    info = (extra_info or {}).get(REWARD_INFO_KEY)
    if not isinstance(info, dict) or "score" not in info:
        raise ValueError(f"sample from {data_source!r} carries no agentbridge reward; its agent_name must select "
                         "the 'agentbridge' agent loop")
    return {key: float(value) for key, value in info.items()}


def reward_keys(spec: Spec) -> list[str]:
    """The ``reward_extra_info`` keys of every sample of a job: ``score``, then the core's reward components.

    veRL indexes a whole batch by the first sample's keys, so they must not depend on the episode.
    """
    return ["score", *reward_components(spec)]


def reward_extra_info(traj: Trajectory, spec: Spec) -> dict[str, float]:
    """The driver's reward: weighted total as ``score``, each component unweighted (dict rewards summed)."""
    return {"score": float(traj.reward), **component_values(traj, reward_components(spec))}
