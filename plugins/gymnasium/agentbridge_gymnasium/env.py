"""A Gymnasium env as a multi-turn text environment: the codec's text in, ``<action>NAME</action>`` out."""

from __future__ import annotations

import re
from typing import Any

from agentbridge import Message, StepResult, Task, Trajectory, text_of, user
from agentbridge_gymnasium.codecs import Codec, codec_for
from agentbridge_gymnasium.expert import blackjack_rule, plan

_ACTION = re.compile(r"<action>\s*(.*?)\s*</action>", re.DOTALL)


def parse_action(text: str, actions: list[str]) -> int | None:
    """The index of the action named in the last ``<action>...</action>`` (or the whole reply), else None."""
    found = _ACTION.findall(text)
    name = (found[-1] if found else text).strip().lower()
    return actions.index(name) if name in actions else None


class GymTextEnv:
    """One Gymnasium episode per agentbridge episode, reset with the task's seed.

    ``env_id``: a Gymnasium id with a codec (``FrozenLake-v1``, ``Taxi-v4``, ``Blackjack-v1``, ``CliffWalking-v1``,
    or your own through ``codec: module:object``); ``env_kwargs``: passed to ``gymnasium.make``; ``map``: the
    codec's per-task arguments (FrozenLake: ``size``, ``frozen``, ``is_slippery``). An answer that names no
    action is told so and costs a turn; the env's reward of each step is the step's reward.
    """

    def __init__(self, env_id: str = "FrozenLake-v1", env_kwargs: dict[str, Any] | None = None,
                 map: dict[str, Any] | None = None, codec: str | None = None, tools: Any = None) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.map = dict(map or {})
        self.codec: Codec = codec_for(env_id, codec)
        self.env: Any = None
        self.obs: Any = None
        self.task: Task | None = None
        self._plan: list[int] | None = None

    async def reset(self, task: Task) -> list[Message]:
        import gymnasium

        self.task = task
        seed = int(task.data["seed"])
        if self.env is not None:
            self.env.close()
        self.env = gymnasium.make(self.env_id, **self.env_kwargs, **self.codec.make_kwargs(seed, self.map))
        self.obs, _ = self.env.reset(seed=seed)
        self._plan = None
        return [user(f"{self.codec.intro}\n\n{self.codec.describe(self.obs, self.env)}")]

    async def step(self, action: Message) -> StepResult:
        assert self.env is not None, "step() before reset()"
        index = parse_action(text_of(action), self.codec.actions)
        if index is None:
            choices = ", ".join(self.codec.actions)
            return StepResult(observation=[user(f"That is not an action. Answer <action>NAME</action> with NAME one "
                                                f"of: {choices}.")], metrics={"gym/invalid_actions": 1.0})
        self.obs, reward, terminated, truncated, _ = self.env.step(index)
        done = bool(terminated or truncated)
        metrics = {"gym/return": float(reward)}
        if done:
            metrics["gym/solved"] = float(self.codec.solved(float(reward), bool(terminated)))
        text = self.codec.describe(self.obs, self.env)
        return StepResult(observation=[] if done else [user(text)], reward=float(reward), done=done, metrics=metrics)

    def expert_action(self) -> str:
        """The solver's move: value iteration on the env's model, or blackjack's basic rule."""
        assert self.env is not None, "expert_action() before reset()"
        if self.env_id.startswith("Blackjack"):
            return f"<action>{self.codec.actions[blackjack_rule(self.obs)]}</action>"
        if not hasattr(self.env.unwrapped, "P"):
            raise ValueError(f"{self.env_id} publishes no model (env.unwrapped.P): no expert to plan with")
        if self._plan is None:
            self._plan = plan(self.env)
        return f"<action>{self.codec.actions[self._plan[int(self.obs)]]}</action>"

    async def close(self) -> None:
        if self.env is not None:
            self.env.close()


def solved(trajectory: Trajectory, task: Any) -> float:
    """1.0 when the episode ended the way the env's codec counts as solved (the goal, the drop-off, a win)."""
    return float(trajectory.metrics.get("gym/solved", 0.0) > 0)


def episode_return(trajectory: Trajectory, task: Any) -> float:
    """The sum of the env's rewards over the episode (its own scale)."""
    return float(trajectory.metrics.get("gym/return", 0.0))
