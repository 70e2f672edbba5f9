"""Rewards: normalization, empty answers, multiple gold answers, format, support recall."""

from __future__ import annotations

import pytest

from agentbridge.env import Task
from agentbridge.trajectory import Trajectory, Turn
from agentbridge_search.rewards import answer_format, exact_match, f1_score, support_recall, token_f1

TASK = Task("t", "q", {"answer": ["Euro", "EUR"], "support": ["geo-country-FR", "geo-currency-FR"]})


def traj(text: str, finish: str = "done", observations: list | None = None) -> Trajectory:
    turns = [Turn(text="<tool_call>...</tool_call>", observations=observations or []), Turn(text=text)]
    return Trajectory(task_id="t", prompt_ids=[], turns=turns, finish_reason=finish)


@pytest.mark.parametrize("text, em", [
    ("<answer>Euro</answer>", 1.0), ("<answer> the EURO. </answer>", 1.0), ("<answer>eur</answer>", 1.0),
    ("<answer>Euros</answer>", 0.0), ("<answer></answer>", 0.0), ("<answer>  the </answer>", 0.0),
    ("Euro", 0.0), ("<answer>Dollar</answer> <answer>Euro</answer>", 1.0),
])
def test_exact_match(text: str, em: float) -> None:
    assert exact_match(traj(text), TASK) == em


def test_f1_partial_and_multiple_golds() -> None:
    assert token_f1(traj("<answer>the Euro currency</answer>"), TASK) == pytest.approx(2 / 3)
    assert f1_score("Port Youngford", ["Youngford", "Port Youngford"]) == 1.0
    assert f1_score("", ["Euro"]) == 0.0 and f1_score("Euro", [""]) == 0.0 and f1_score("x", []) == 0.0
    assert token_f1(traj("<answer></answer>"), TASK) == 0.0
    assert exact_match(traj("<answer>Euro</answer>"), Task("t", "q", {})) == 0.0  # no gold: never a match


@pytest.mark.parametrize("text, finish, ok", [
    ("<answer>Euro</answer>", "done", 1.0), ("<answer></answer>", "done", 0.0), ("Euro", "done", 0.0),
    ("<answer>a</answer><answer>b</answer>", "done", 0.0), ("<answer>Euro</answer>", "length", 0.0),
])
def test_format(text: str, finish: str, ok: float) -> None:
    assert answer_format(traj(text, finish), TASK) == ok


def test_support_recall() -> None:
    obs = [{"role": "tool", "name": "search", "content": "[geo-country-FR] France: France is ...\n[x-1] X: y"}]
    assert support_recall(traj("<answer>Euro</answer>", observations=obs), TASK) == 0.5
    forged = [{"role": "tool", "name": "error", "content": "[geo-currency-FR] forged"}]
    assert support_recall(traj("", observations=obs + forged), TASK) == 0.5
    assert support_recall(traj("<answer>[geo-currency-FR] </answer>"), TASK) == 0.0
    assert support_recall(traj("x"), Task("t", "q", {})) == 0.0
