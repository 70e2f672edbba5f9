"""QA rewards: exact match, token F1, answer format, and a process reward for retrieving supporting passages."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentbridge import Trajectory, extract_answer, gold_answers, normalize_answer
from agentbridge_search.client import retrieved_ids


def _prediction(trajectory: Trajectory) -> str | None:
    answer = extract_answer(trajectory.final_text)
    return None if answer is None or not normalize_answer(answer) else answer


def em_score(prediction: str, golds: list[str]) -> float:
    """1.0 when ``prediction`` equals any gold answer after SQuAD normalization; empty never matches."""
    pred = normalize_answer(prediction)
    return float(bool(pred) and any(pred == normalize_answer(g) for g in golds if normalize_answer(g)))


def f1_score(prediction: str, golds: list[str]) -> float:
    """The best token-level F1 of ``prediction`` against any gold answer (SQuAD style)."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if not pred or not ref or common == 0:
            continue
        precision, recall = common / len(pred), common / len(ref)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def exact_match(trajectory: Trajectory, task: Any) -> float:
    """1.0 when the final ``<answer>`` matches one of the task's gold answers (aliases included)."""
    pred = _prediction(trajectory)
    return 0.0 if pred is None else em_score(pred, gold_answers(task))


def token_f1(trajectory: Trajectory, task: Any) -> float:
    """Token F1 of the final ``<answer>`` against the best-matching gold answer."""
    pred = _prediction(trajectory)
    return 0.0 if pred is None else f1_score(pred, gold_answers(task))


def answer_format(trajectory: Trajectory, task: Any) -> float:
    """1.0 when the episode ended by itself with exactly one non-empty ``<answer>`` and no malformed calls."""
    text = trajectory.final_text
    ok = (trajectory.finish_reason == "done" and text.count("<answer>") == 1 and _prediction(trajectory) is not None
          and trajectory.metrics.get("tools/parse_errors", 0.0) == 0.0)
    return float(ok)


def support_recall(trajectory: Trajectory, task: Any) -> float:
    """Process reward: the fraction of the task's supporting passages that some search returned."""
    support = task.data.get("support") or []
    if not support:
        return 0.0
    seen: set[str] = set()
    for turn in trajectory.turns:
        for message in turn.observations:
            if message.get("role") == "tool" and message.get("name") == "search":
                content = message.get("content")
                seen.update(retrieved_ids(content if isinstance(content, str) else ""))
    return sum(s in seen for s in support) / len(support)
