"""A multi-turn verifiers 0.4.0 environment: guess the secret number. The env's own ``run()`` plays the user, as
verifiers' TextArena and OpenEnv envs do: each reply is a guess, the env answers "higher" or "lower" through
``interaction.turn`` until the guess is right; it records ``solved`` on the trace, and the task adds a weighted
``efficiency`` reward."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

SYSTEM_PROMPT = "Guess the secret number. Reply with one number only."


class GuessData(vf.TaskData):
    secret: int
    high: int


class GuessTask(vf.Task[GuessData]):
    @vf.reward(weight=0.5)
    async def efficiency(self, trace: vf.Trace) -> float:
        return 1.0 / max(1, trace.num_turns)


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


def _guess(reply: str) -> int | None:
    found = re.findall(r"-?\d+", reply)
    return int(found[-1]) if found else None


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task: GuessTask, agents: vf.Agents) -> None:
        solved = 0.0
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                guess = _guess(segment.last_reply)
                if guess == task.data.secret:
                    solved = 1.0
                    break
                hint = ("That is not a number." if guess is None
                        else f"{guess} is too low." if guess < task.data.secret else f"{guess} is too high.")
                segment = await interaction.turn(hint)
        interaction.trace.record_reward("solved", solved, 1.0)


class GuessConfig(vf.TasksetConfig):
    num_tasks: int = 200
    high: int = 16


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self) -> Iterator[GuessTask]:
        rng = random.Random(2)
        for i in range(self.config.num_tasks):
            yield GuessTask(GuessData(id=f"guess-{i}", prompt=f"The number is between 1 and {self.config.high}.",
                                      system_prompt=SYSTEM_PROMPT, secret=rng.randint(1, self.config.high),
                                      high=self.config.high), self.config.task)


def expert(task: dict[str, Any], messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """Bisection on the hints so far."""
    low, high = 1, task["high"]
    for m in messages:
        text = m.get("content") if isinstance(m.get("content"), str) else ""
        found = re.match(r"(-?\d+) is too (low|high)", text or "")
        if found:
            n = int(found.group(1))
            low, high = (max(low, n + 1), high) if found.group(2) == "low" else (low, min(high, n - 1))
    return str((low + high) // 2)


__all__ = ["GuessEnv", "GuessTaskset"]
