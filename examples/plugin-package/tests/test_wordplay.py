"""The wordplay plugin: the expert solves every task end to end; the reward's edge cases; the dataset."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentbridge.env import Task
from agentbridge.plugins import Plugins
from agentbridge.rewards import answer_format
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import check_environment
from agentbridge.trajectory import Trajectory, Turn
from agentbridge_wordplay import plugin
from agentbridge_wordplay.env import ReverseEnv
from agentbridge_wordplay.rewards import exact_reverse
from agentbridge_wordplay.tasks import word_tasks

SPEC = Path(__file__).resolve().parents[1] / "spec.yaml"


@pytest.fixture(scope="module")
def agent() -> Agent:
    from agentbridge.models import load_tokenizer

    spec = load_spec(str(SPEC))
    # Register this plugin in-process, so the test does not depend on what is installed.
    plugins = Plugins(entry_points=False, extra=[("wordplay", plugin)])
    return Agent(spec, load_tokenizer(spec.model.path), plugins)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_expert_solves_every_task(agent: Agent, split: str) -> None:
    tasks = agent.tasks(split, size=16)
    trajs = asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)))
    for task, traj in zip(tasks, trajs, strict=True):
        assert traj.finish_reason == "done", traj.error
        assert traj.reward_components["wordplay/exact"] == 1.0 and traj.reward_components["core/format"] == 1.0
        assert traj.turns[0].observations[0]["content"] == task.data["answer"]


def test_check_environment() -> None:
    """agentbridge's environment checker: messages and step results well-typed, the tool documented, the expert
    solves every task, bad tool calls become messages to the model."""
    check_environment(ReverseEnv, word_tasks("train", 8) + word_tasks("eval", 2),
                      rewards={"wordplay/exact": exact_reverse, "core/format": answer_format})


@pytest.mark.parametrize(("turns", "expected"), [
    (["<answer>olleh</answer>"], 1.0),
    (["Reversed: <answer> olleh </answer>"], 1.0),          # surrounding spaces are ignored
    (["<answer>hello</answer> <answer>olleh</answer>"], 1.0),  # the last answer counts
    (["<answer>olleh</answer>", "<answer>hello</answer>"], 0.0),  # only the final turn counts
    (["<answer>OLLEH</answer>"], 0.0),                      # case matters
    (["<answer></answer>"], 0.0),
    (["olleh"], 0.0),                                       # no answer tags
    (["<answer>olleh"], 0.0),                               # unclosed tag
    ([], 0.0),                                              # no turns at all
])
def test_exact_reward_edge_cases(turns: list[str], expected: float) -> None:
    task = Task(id="t", prompt="Reverse the word 'hello'.", data={"word": "hello", "answer": "olleh"})
    traj = Trajectory(task_id="t", prompt_ids=[], turns=[Turn(text=t) for t in turns])
    assert exact_reverse(traj, task) == expected


def test_dataset_is_seeded_and_splits_are_disjoint() -> None:
    def words(tasks: list[Task]) -> list[str]:
        return [t.data["word"] for t in tasks]

    assert words(word_tasks("train", 50, seed=1)) == words(word_tasks("train", 50, seed=1))
    assert words(word_tasks("train", 50, seed=1)) != words(word_tasks("train", 50, seed=2))
    train, held_out = word_tasks("train", 500), word_tasks("eval", 50)
    assert len(set(words(train))) == 500 and not set(words(train)) & set(words(held_out))
    assert held_out[0].prompt == f"Reverse the word '{held_out[0].data['word']}'."
    with pytest.raises(ValueError, match="split"):
        word_tasks("test", 5)
