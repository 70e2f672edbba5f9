"""agentbridge's own pieces, registered as a default plugin exactly like a third party's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentbridge.hooks import hookimpl
from agentbridge.judge import judge_reward
from agentbridge.reward_model import reward_model_reward
from agentbridge.rewards import answer_format, exact_answer
from agentbridge.rollout.parsers import HermesParser


@hookimpl
def register_tool_parsers(register: Callable[[str, Any], None]) -> None:
    register("hermes", HermesParser())


@hookimpl
def register_rewards(register: Callable[[str, Any], None]) -> None:
    register("core/exact_answer", exact_answer)
    register("core/format", answer_format)
    register("core/judge", judge_reward)
    register("core/reward_model", reward_model_reward)
