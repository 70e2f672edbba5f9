"""The answer environment (one turn: the model answers in ``<answer>...</answer>``) and reasoning-gym's verifier
as the reward."""

from __future__ import annotations

from typing import Any

from agentbridge import ToolEnvironment, Trajectory, extract_answer
from agentbridge_reasoning_gym.tasks import entry, score_answer_fn

SYSTEM_PROMPT = "Solve the problem. Give only the final answer as <answer>...</answer>."


class AnswerEnv(ToolEnvironment):
    """A question, one answer: the episode ends with the model's first reply. The scripted expert answers with
    reasoning-gym's reference answer (for warm starts and the conformance of rollouts)."""

    def __init__(self, tools: Any = (), timeout_s: float = 10.0) -> None:
        super().__init__(tools, timeout_s=timeout_s)

    def expert_action(self) -> str:
        """The reference answer, as the model should write it."""
        assert self.task is not None, "expert_action() before reset()"
        return f"<answer>{self.task.data['answer']}</answer>"


def verified_score(trajectory: Trajectory, task: Any) -> float:
    """reasoning-gym's own ``score_answer`` for the final ``<answer>`` (0 when there is none); partial credit
    where the task's verifier gives it."""
    answer = extract_answer(trajectory.final_text)
    if answer is None:
        return 0.0
    rg = task.data["rg"]
    item = entry(rg["task"], rg["config"], rg["seed"], rg["index"])
    return float(score_answer_fn(rg["task"])(answer, item))
