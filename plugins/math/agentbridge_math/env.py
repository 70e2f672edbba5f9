"""The calculator environment and its scripted expert."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from agentbridge import ToolEnvironment, ToolSpec, Trajectory, extract_answer, text_of
from agentbridge_math.calculator import calculator

SYSTEM_PROMPT = ("Solve the arithmetic problem. Call the calculator for every step, "
                 "then give the final number as <answer>N</answer>.")


def answers_in_head(prompt: str, rate: float) -> bool:
    """Whether the imperfect expert answers this one-step sum or difference without the calculator.

    Fixed per problem (a hash of its text), so a given problem is always demonstrated the same way, while from
    the problem's wording the choice looks random: a policy that imitates the expert skips the tool on about
    ``rate`` of such problems, whatever it learns.
    """
    if rate <= 0:
        return False
    band = int.from_bytes(hashlib.sha256(f"in-head:{prompt}".encode()).digest()[:4], "big") / 2**32
    return band < rate


class CalculatorEnv(ToolEnvironment):
    """Tool environment with the calculator; the episode ends when the model answers without a tool call.

    ``expert_in_head`` makes the scripted expert imperfect in a way imitation cannot fix: on that share of the
    one-step additions and subtractions it writes the right answer at once, done in its head, without calling the
    calculator. Its demonstrations stay correct, but a policy that copies them must do the sum itself (a tiny model
    cannot), so imitation has a ceiling below the task's and only the reward shows the policy the better way.
    """

    def __init__(self, tools: Sequence[ToolSpec] | None = None, timeout_s: float = 5.0,
                 max_output_chars: int = 2000, expert_in_head: float = 0.0) -> None:
        super().__init__(tools or [calculator], timeout_s=timeout_s, max_output_chars=max_output_chars)
        if not 0.0 <= expert_in_head <= 1.0:
            raise ValueError(f"environment.args.expert_in_head must be between 0 and 1, got {expert_in_head}")
        self.expert_in_head = expert_in_head

    def expert_action(self) -> str:
        """Call the calculator for the next step (using the last tool result), then answer.

        With ``expert_in_head``, some one-step sums and differences are answered at once (see the class).
        """
        assert self.task is not None, "expert_action() before reset()"
        results = [text_of(m) for m in self.history if m.get("role") == "tool"]
        steps: list[str] = self.task.data["steps"]
        if not results and self._in_head(steps):
            return f"<answer>{self.task.data['answer']}</answer>"
        if len(results) < len(steps):
            expression = steps[len(results)].format(prev=results[-1] if results else "")
            call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
            return f"<tool_call>\n{call}\n</tool_call>"
        return f"<answer>{results[-1] if results else ''}</answer>"

    def _in_head(self, steps: list[str]) -> bool:
        assert self.task is not None
        one_sum = len(steps) == 1 and (" + " in steps[0] or " - " in steps[0])
        return one_sum and answers_in_head(self.task.prompt, self.expert_in_head)


def exact_number(trajectory: Trajectory, task: Any) -> float:
    """1.0 when the final ``<answer>`` is numerically equal to the task's answer."""
    answer = extract_answer(trajectory.final_text)
    if answer is None:
        return 0.0
    try:
        return float(abs(float(answer.replace(",", "")) - float(task.data["answer"])) < 1e-6)
    except ValueError:
        return 0.0
