"""The driver, as a backend's rollout runs it (``from agentbridge.adapter.rollout import ...``); the episode loop
itself is :mod:`agentbridge.adapter.episode`.

- the agent and its tasks: :class:`Agent`, :func:`load_tasks`, :func:`read_tasks_jsonl`;
- what one episode is made of: :class:`Trajectory`, :class:`Generation`, :class:`SamplingParams`, :class:`Limits`,
  :data:`FINISH_REASONS`; the chat rendering: :class:`Renderer`;
- the driver's edge to a trainer: :func:`prompt_messages`, :func:`fit_limits`, :func:`reward_components`,
  :func:`component_values`;
- training sequences: :class:`TrainingSequence`, :func:`training_sequence`, :func:`task_prompt_ids`,
  :func:`episode_sample`, :func:`shape_reward`, :func:`token_rewards`, :func:`episode_metrics`;
- the policies: :class:`HFPolicy` and :class:`HFVLMPolicy` (a Hugging Face model; :func:`cache_kwarg`,
  :func:`output_cache`), :class:`BatchingPolicy` (:func:`cut_at_eos`), :class:`ScriptedPolicy`.

Each name is imported from ``agentbridge.rollout`` on first use (the Hugging Face policies import torch only when
they run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbridge.adapter import _lazy

if TYPE_CHECKING:
    from agentbridge.rollout.agent import Agent, load_tasks, read_tasks_jsonl
    from agentbridge.rollout.agent_edge import component_values, fit_limits, prompt_messages, reward_components
    from agentbridge.rollout.batching import BatchingPolicy, cut_at_eos
    from agentbridge.rollout.hf_policy import HFPolicy, cache_kwarg, output_cache
    from agentbridge.rollout.hf_vlm_policy import HFVLMPolicy
    from agentbridge.rollout.policy import ScriptedPolicy
    from agentbridge.rollout.renderer import Renderer
    from agentbridge.rollout.training import (
        TrainingSequence,
        episode_metrics,
        episode_sample,
        shape_reward,
        task_prompt_ids,
        token_rewards,
        training_sequence,
    )
    from agentbridge.trajectory import FINISH_REASONS, Generation, Limits, SamplingParams, Trajectory

# name -> the core module that defines it
_CORE = {
    "Agent": "agentbridge.rollout.agent",
    "load_tasks": "agentbridge.rollout.agent",
    "read_tasks_jsonl": "agentbridge.rollout.agent",
    "component_values": "agentbridge.rollout.agent_edge",
    "fit_limits": "agentbridge.rollout.agent_edge",
    "prompt_messages": "agentbridge.rollout.agent_edge",
    "reward_components": "agentbridge.rollout.agent_edge",
    "BatchingPolicy": "agentbridge.rollout.batching",
    "cut_at_eos": "agentbridge.rollout.batching",
    "HFPolicy": "agentbridge.rollout.hf_policy",
    "cache_kwarg": "agentbridge.rollout.hf_policy",
    "output_cache": "agentbridge.rollout.hf_policy",
    "HFVLMPolicy": "agentbridge.rollout.hf_vlm_policy",
    "ScriptedPolicy": "agentbridge.rollout.policy",
    "Renderer": "agentbridge.rollout.renderer",
    "TrainingSequence": "agentbridge.rollout.training",
    "episode_metrics": "agentbridge.rollout.training",
    "episode_sample": "agentbridge.rollout.training",
    "shape_reward": "agentbridge.rollout.training",
    "task_prompt_ids": "agentbridge.rollout.training",
    "token_rewards": "agentbridge.rollout.training",
    "training_sequence": "agentbridge.rollout.training",
    "FINISH_REASONS": "agentbridge.trajectory",
    "Generation": "agentbridge.trajectory",
    "Limits": "agentbridge.trajectory",
    "SamplingParams": "agentbridge.trajectory",
    "Trajectory": "agentbridge.trajectory",
}

__all__ = [
    "FINISH_REASONS", "Agent", "BatchingPolicy", "Generation", "HFPolicy", "HFVLMPolicy", "Limits", "Renderer",
    "SamplingParams", "ScriptedPolicy", "TrainingSequence", "Trajectory", "cache_kwarg", "component_values",
    "cut_at_eos", "episode_metrics", "episode_sample", "fit_limits", "load_tasks", "output_cache", "prompt_messages",
    "read_tasks_jsonl", "reward_components", "shape_reward", "task_prompt_ids", "token_rewards", "training_sequence",
]


def __getattr__(name: str) -> Any:
    return _lazy.load(_CORE, __name__, name)
