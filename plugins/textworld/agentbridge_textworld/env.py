"""A TextWorld game as a multi-turn text environment: the game's text in, ``<action>COMMAND</action>`` out."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from agentbridge import Message, StepResult, Task, text_of, user
from agentbridge_textworld.games import game_file

_ACTION = re.compile(r"<action>\s*(.*?)\s*</action>", re.DOTALL)
_PROMPT = re.compile(r"(^|\n)>(\s.*)?$", re.DOTALL)  # the interpreter's prompt, and the status line after it


def parse_command(text: str) -> str:
    """The command in the last ``<action>...</action>`` (or the whole reply), on one line; may be empty."""
    found = _ACTION.findall(text)
    return " ".join((found[-1] if found else text).split())


def _clean(feedback: str) -> str:
    """The game's text without the interpreter's prompt and status line, blank lines collapsed."""
    return re.sub(r"\n{3,}", "\n\n", _PROMPT.sub("", feedback.strip())).strip()


class TextWorldEnv:
    """One TextWorld game per episode (the task's challenge, settings and seed), played through TextWorld's own
    interpreter. The first message is the game's objective and the room; each command's reply is the next one.
    The score's increase is the step's reward; the episode ends when the game is won or lost."""

    def __init__(self, max_output_chars: int = 2000, tools: Any = None) -> None:
        self.max_output_chars = max_output_chars
        self.env: Any = None
        self.state: Any = None
        self.task: Task | None = None
        self.score = 0

    async def reset(self, task: Task) -> list[Message]:
        import textworld

        self.task = task
        path = await asyncio.to_thread(game_file, task.data["challenge"], task.data["settings"],
                                       int(task.data["game_seed"]))
        infos = textworld.EnvInfos(policy_commands=True, max_score=True, won=True, lost=True, objective=True,
                                   description=True, score=True)
        if self.env is not None:
            self.env.close()
        self.env = textworld.start(str(path), request_infos=infos)
        self.state = self.env.reset()
        self.score = 0
        return [user(f"{self.state.objective.strip()}\n\n{_clean(self.state.description)}"[: self.max_output_chars])]

    async def step(self, action: Message) -> StepResult:
        assert self.env is not None, "step() before reset()"
        command = parse_command(text_of(action))
        if not command:
            return StepResult(observation=[user("Answer with one command as <action>COMMAND</action>.")],
                              metrics={"textworld/invalid_actions": 1.0})
        self.state, score, done = self.env.step(command)
        reward, self.score = float(score - self.score), int(score)
        max_score = max(1, int(self.state.max_score or 1))
        metrics = {"textworld/score": reward / max_score}
        if done:
            metrics["textworld/won"] = float(bool(self.state.won))
            return StepResult(observation=[], reward=reward, done=True, metrics=metrics)
        return StepResult(observation=[user(_clean(self.state.feedback)[: self.max_output_chars])], reward=reward,
                          metrics=metrics)

    def expert_action(self) -> str:
        """The next command of the game's own walkthrough from where the player stands (TextWorld's policy)."""
        assert self.state is not None, "expert_action() before reset()"
        commands = self.state.policy_commands or ["look"]
        return f"<action>{commands[0]}</action>"

    async def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def won(trajectory: Any, task: Any) -> float:
    """1.0 when the game was won."""
    return float(trajectory.metrics.get("textworld/won", 0.0) > 0)


def score(trajectory: Any, task: Any) -> float:
    """The share of the game's points the episode earned (0 to 1)."""
    return float(trajectory.metrics.get("textworld/score", 0.0))
