"""The ``wordplay/exact`` reward: ``(trajectory, task) -> float``."""

from __future__ import annotations

from agentbridge import Task, Trajectory, extract_answer


def exact_reverse(trajectory: Trajectory, task: Task) -> float:
    """1.0 when the final ``<answer>...</answer>`` is exactly the reversed word, else 0.0."""
    answer = extract_answer(trajectory.final_text)
    return float(answer is not None and answer == task.data["answer"])
