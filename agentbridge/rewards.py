"""Reward functions and their weighted composition.

A reward function is ``(trajectory, task) -> float | dict[str, float]`` (sync or async). Rewards run inside
the driver, so every backend receives the same numbers.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbridge.env import Task
    from agentbridge.rollout.trajectory import Trajectory

RewardFn = Callable[["Trajectory", "Task"], "float | dict[str, float] | Awaitable[float | dict[str, float]]"]

PROCESS = "process"  # component holding the sum of the environment's per-step rewards

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` in ``text``, or None."""
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse spaces (SQuAD-style)."""
    text = re.sub(r"[^\w\s.]", " ", text.lower())
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def gold_answers(task: Task) -> list[str]:
    gold = task.data.get("answer")
    if gold is None:
        return []
    return [str(g) for g in gold] if isinstance(gold, list | tuple) else [str(gold)]


def exact_answer(trajectory: Trajectory, task: Task) -> float:
    """1.0 when the final ``<answer>`` equals one of ``task.data["answer"]`` after normalization."""
    answer = extract_answer(trajectory.final_text)
    if answer is None:
        return 0.0
    return float(any(normalize_answer(answer) == normalize_answer(g) for g in gold_answers(task)))


def answer_format(trajectory: Trajectory, task: Task) -> float:
    """1.0 when the episode ended by itself with one non-empty ``<answer>`` and no malformed tool calls."""
    answers = _ANSWER.findall(trajectory.final_text)
    ok = (trajectory.finish_reason == "done" and len(answers) == 1 and answers[0].strip() != ""
          and trajectory.metrics.get("tools/parse_errors", 0.0) == 0.0)
    return float(ok)


@dataclass
class WeightedReward:
    id: str
    fn: RewardFn
    weight: float = 1.0
    args: dict[str, Any] | None = None
    per: str = "episode"  # episode | turn (a process reward: scores each assistant turn)


class RewardSet:
    """The spec's ``reward:`` list: computes each component by name and their weighted sum."""

    def __init__(self, items: list[WeightedReward]) -> None:
        self.items = items

    @property
    def weights(self) -> dict[str, float]:
        return {item.id: item.weight for item in self.items}

    async def score(self, trajectory: Trajectory, task: Task) -> tuple[dict[str, float], list[str]]:
        """Unweighted components by id (``id/key`` for dict-valued rewards) and the errors met.

        A ``per: turn`` reward scores each turn on :meth:`Trajectory.through_turn` (all turns at once, so a batched
        reward model sees them together); its scores are kept on the turns (``Turn.scores``) and its component is
        their sum. A reward function that raises scores 0 for its component (or that turn) and reports the error;
        it never fails the episode.
        """
        components: dict[str, float] = {}
        errors: list[str] = []
        for item in self.items:
            if item.per == "episode":
                components.update(await _component(item, trajectory, task, errors, ""))
        turn_items = [item for item in self.items if item.per == "turn"]
        if turn_items:
            views = [trajectory.through_turn(i) for i in range(len(trajectory.turns))]
            per_turn = await asyncio.gather(*(_component(item, view, task, errors, f" (turn {i + 1})")
                                              for i, view in enumerate(views) for item in turn_items))
            for i, turn in enumerate(trajectory.turns):
                for values in per_turn[i * len(turn_items):(i + 1) * len(turn_items)]:
                    turn.scores.update(values)
            for item in turn_items:  # the component exists even for an episode without turns
                names = {n for t in trajectory.turns for n in t.scores if n == item.id or n.startswith(f"{item.id}/")}
                for name in sorted(names) or [item.id]:
                    components[name] = sum(t.scores.get(name, 0.0) for t in trajectory.turns)
        return components, errors

    def total(self, components: dict[str, float]) -> float:
        """Weighted sum; dict-valued components share their reward's weight; ``process`` has weight 1."""
        total = 0.0
        for name, value in components.items():
            base = name if name in self.weights or name == PROCESS else name.rsplit("/", 1)[0]
            total += self.weights.get(base, 1.0) * value
        return total


async def _component(item: WeightedReward, trajectory: Trajectory, task: Task, errors: list[str],
                     where: str) -> dict[str, float]:
    """One reward's value(s) on ``trajectory`` by component name; 0 and an error line when it raises."""
    try:
        value = item.fn(trajectory, task, **(item.args or {}))
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, dict):
            return {f"{item.id}/{k}": float(v) for k, v in value.items()}
        return {item.id: float(value)}
    except Exception as e:  # noqa: BLE001 - one broken reward must not crash the batch
        errors.append(f"reward {item.id}{where}: {type(e).__name__}: {e}")
        return {item.id: 0.0}
