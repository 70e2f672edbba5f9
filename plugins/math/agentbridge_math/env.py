"""The calculator environment and its scripted expert."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentbridge.env import text_of
from agentbridge.rewards import extract_answer
from agentbridge.rollout.trajectory import Trajectory
from agentbridge.tools import ToolEnvironment, ToolSpec
from agentbridge_math.calculator import calculator

SYSTEM_PROMPT = ("Solve the arithmetic problem. Call the calculator for every step, "
                 "then give the final number as <answer>N</answer>.")


class CalculatorEnv(ToolEnvironment):
    """Tool environment with the calculator; the episode ends when the model answers without a tool call."""

    def __init__(self, tools: Sequence[ToolSpec] | None = None, timeout_s: float = 5.0,
                 max_output_chars: int = 2000) -> None:
        super().__init__(tools or [calculator], timeout_s=timeout_s, max_output_chars=max_output_chars)

    def expert_action(self) -> str:
        """Call the calculator for the next step (using the last tool result), then answer."""
        assert self.task is not None, "expert_action() before reset()"
        results = [text_of(m) for m in self.history if m.get("role") == "tool"]
        steps: list[str] = self.task.data["steps"]
        if len(results) < len(steps):
            expression = steps[len(results)].format(prev=results[-1] if results else "")
            call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
            return f"<tool_call>\n{call}\n</tool_call>"
        return f"<answer>{results[-1] if results else ''}</answer>"


def exact_number(trajectory: Trajectory, task: Any) -> float:
    """1.0 when the final ``<answer>`` is numerically equal to the task's answer."""
    answer = extract_answer(trajectory.final_text)
    if answer is None:
        return 0.0
    try:
        return float(abs(float(answer.replace(",", "")) - float(task.data["answer"])) < 1e-6)
    except ValueError:
        return 0.0
