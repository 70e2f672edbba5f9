"""Reward functions and their weighted composition.

A reward function is ``(trajectory, task) -> float | dict[str, float]`` (sync or async). Rewards run inside
the driver, so every backend receives the same numbers.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbridge.env import Task
    from agentbridge.trajectory import Trajectory

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


def callable_name(obj: Any) -> str:
    """A callable's qualified name (its type's name for an object without one)."""
    return str(getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__)


def call_shape(obj: Any, sig: inspect.Signature) -> str:
    """``name(a, b, *args, **kwargs)``: how a callable's parameters read, without annotations or defaults."""
    parts = []
    for p in sig.parameters.values():
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")  # type: ignore[call-overload]
        parts.append(f"{prefix}{p.name}" + ("" if p.default is p.empty else "=..."))
    return f"{callable_name(obj)}({', '.join(parts)})"


def positional_only_required(sig: inspect.Signature, skip: int = 0) -> list[str]:
    """Required positional-only parameters after the first ``skip``: no keyword argument can fill them."""
    params = list(sig.parameters.values())[skip:]
    return [p.name for p in params if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]


def reward_problem(fn: Any) -> str | None:
    """Why ``fn`` cannot be called as the driver calls a reward, ``fn(trajectory, task, **args)``, in one line; None
    when it can (or when its signature cannot be read)."""
    if not callable(fn):
        return f"expected a function (trajectory, task, **args) -> float | dict[str, float], got {type(fn).__name__}"
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in params):
        return (f"{call_shape(fn, sig)} cannot be called as fn(trajectory, task, **args): a reward receives the "
                "episode's Trajectory and its Task as its first two arguments")
    if fixed := positional_only_required(sig, skip=2):
        return (f"{call_shape(fn, sig)}: positional-only parameter(s) {', '.join(fixed)} cannot be given; a "
                "reward's reward[].args are passed by keyword")
    return None


def _error_head(id: str) -> str:
    """The pattern opening a reward's error line (:func:`_component`): ``reward ID: `` or ``reward ID (turn N): ``."""
    return rf"reward {re.escape(id)}(?: \(turn \d+\))?: "


def reward_errors(error: str | None, ids: Iterable[str]) -> dict[str, str]:
    """The first error of each reward in ``ids`` found in an episode's ``error`` (where the driver joins the lines
    :meth:`RewardSet.score` reports with ``"; "``), by reward id; ``{}`` when none failed."""
    if not error:
        return {}
    ids = list(ids)
    if not ids:
        return {}
    boundary = re.compile("; (?:" + "|".join(_error_head(i) for i in sorted(ids, key=len, reverse=True)) + ")")
    out: dict[str, str] = {}
    for id in ids:
        found = re.search("(?:^|; )" + _error_head(id), error)
        if found is None:
            continue
        end = boundary.search(error, found.end())
        out[id] = error[found.end():end.start() if end else len(error)]
    return out


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
