"""Calculator agent: safe evaluation, seeded disjoint splits, expert solves every task, reward."""

from __future__ import annotations

import asyncio

import pytest

from agentbridge.env import Task
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.trajectory import Trajectory, Turn
from agentbridge_math.calculator import evaluate
from agentbridge_math.env import CalculatorEnv, answers_in_head, exact_number
from agentbridge_math.tasks import arithmetic_tasks


@pytest.mark.parametrize("expr, want", [("15 + 27", "42"), ("(15 + 27) * 3", "126"), ("7 / 2", "3.5"),
                                        ("-3 ** 2", "-9"), ("2 ** 10", "1024"), ("10 // 3", "3")])
def test_evaluate(expr: str, want: str) -> None:
    assert evaluate(expr) == want


@pytest.mark.parametrize("expr, needle", [
    ("__import__('os').system('true')", "unsupported syntax"), ("x + 1", "unsupported syntax"),
    ("9 ** 9 ** 9", "exponents"), ("1 / 0", "division by zero"), ("1 +", "not an arithmetic"),
    ("1" * 300, "longer than"), ("10 ** 40", "too large"), ("'a' * 3", "unsupported"),
])
def test_evaluate_rejects(expr: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        evaluate(expr)


def test_tasks_are_seeded_and_splits_disjoint() -> None:
    a = arithmetic_tasks("train", 300, seed=1)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in arithmetic_tasks("train", 300, seed=1)]
    assert [t.prompt for t in a] != [t.prompt for t in arithmetic_tasks("train", 300, seed=2)]
    held_out = {t.prompt for s in range(3) for t in arithmetic_tasks("eval", 200, seed=s)}
    dev = {t.prompt for s in range(3) for t in arithmetic_tasks("dev", 200, seed=s)}
    assert not held_out & {t.prompt for t in a} and not dev & {t.prompt for t in a} and not dev & held_out
    assert len(dev) > 500 and len(held_out) > 500

    assert any(len(t.data["steps"]) == 2 for t in a) and any(len(t.data["steps"]) == 1 for t in a)
    assert {t.data["group"] for t in a} == {"1-step add/sub", "1-step mul/div", "2-step"}
    assert all(t.data["group"] == "2-step" for t in a if len(t.data["steps"]) == 2)
    for t in a:
        last = t.data["steps"][0]
        if len(t.data["steps"]) == 2:
            last = t.data["steps"][1].format(prev=f"({last})")
        assert evaluate(last) == t.data["answer"]


@pytest.mark.parametrize("expr", ['"\\d"', "1and 2", "0x1for"])
def test_evaluate_is_silent_on_odd_literals(expr: str) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a SyntaxWarning from parsing would fail here
        with pytest.raises(ValueError):
            evaluate(expr)


def test_expert_solves_every_task() -> None:
    from agentbridge.models import load_tokenizer

    tiny_tokenizer = load_tokenizer("builtin:tiny")
    spec = load_spec("examples/calculator.yaml")
    agent = Agent.from_spec(spec, tiny_tokenizer)
    tasks = agent.tasks("eval", size=50)
    trajs = asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, tiny_tokenizer)))
    assert all(t.finish_reason == "done" and t.reward_components["math/exact_answer"] == 1.0 for t in trajs)
    rate = spec.environment.args["expert_in_head"]
    in_head = [answers_in_head(t.prompt, rate) and t.data["group"] == "1-step add/sub" for t in tasks]
    assert any(in_head)  # the example's expert is imperfect: it skips the tool on some one-step sums
    for task, traj, skipped in zip(tasks, trajs, in_head, strict=True):
        assert traj.metrics["tools/calls"] == (0 if skipped else len(task.data["steps"])), task.prompt


def test_imperfect_expert_skips_the_tool_on_its_share_of_sums_only() -> None:
    tasks = arithmetic_tasks("train", size=2000)
    sums = [t for t in tasks if t.data["group"] == "1-step add/sub"]
    share = sum(answers_in_head(t.prompt, 0.6) for t in sums) / len(sums)
    assert 0.55 < share < 0.65, share
    assert not any(answers_in_head(t.prompt, 0.0) for t in tasks)
    assert all(answers_in_head(t.prompt, 1.0) for t in tasks)
    assert [answers_in_head(t.prompt, 0.6) for t in sums] == [answers_in_head(t.prompt, 0.6) for t in sums]
    with pytest.raises(ValueError, match="expert_in_head must be between 0 and 1"):
        CalculatorEnv(expert_in_head=1.5)


@pytest.mark.parametrize("text, score", [("<answer>42</answer>", 1.0), ("<answer>42.0</answer>", 1.0),
                                         ("<answer>41</answer>", 0.0), ("42", 0.0), ("<answer></answer>", 0.0),
                                         ("<answer>forty</answer>", 0.0), ("<answer>4,2</answer>", 1.0)])
def test_exact_number(text: str, score: float) -> None:
    traj = Trajectory(task_id="t", prompt_ids=[], turns=[Turn(text=text)])
    assert exact_number(traj, Task("t", "q", {"answer": "42"})) == score
