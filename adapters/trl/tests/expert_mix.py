"""Test helper: make every other episode of a rollout play the scripted expert (real tool turns, rewards)."""

from __future__ import annotations

from typing import Any

from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge_trl.rollout import AgentRollout


def mix_in_expert(rollout: AgentRollout, tokenizer: Any) -> None:
    """Episodes alternate between the trainer's sampled policy and the environment's expert."""
    plain = AgentRollout.policy

    def mixed(self: AgentRollout, trainer: Any, model: Any) -> Any:
        sampled = plain(self, trainer, model)
        flip = {"n": 0}

        def choose(env: Any) -> Any:
            flip["n"] += 1
            return ScriptedPolicy.for_env(env, tokenizer) if flip["n"] % 2 else sampled
        return choose

    rollout.policy = mixed.__get__(rollout)  # type: ignore[method-assign]
